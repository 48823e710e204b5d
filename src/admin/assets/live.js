// Live: small line charts of the gateway's numbers (the same /metrics
// exports), one `sample` event a second from EventSource("api/live"),
// the last two minutes kept. The stream is open only while the view is.
import { $, h, show } from "./lib.js";

const KEEP = 120;
// Each chart's lines: a field of the sample, or a number made from it.
const field = (key) => (sample) => sample[key];
const CHARTS = [
  { id: "turns", title: "Turns/s", series: [field("turns_per_s")] },
  { id: "replies", title: "Replies/s", series: [field("replies_per_s")] },
  { id: "errors", title: "Errors/s", series: [field("errors_per_s")] },
  { id: "queues", title: "Queues (inbound, outbound)", series: [field("inbound_queue"), field("outbound_queue")] },
  // A second without a model call has no latency: the line holds at 0 there.
  { id: "latency", title: "Model latency (ms)", series: [(sample) => (sample.model_latency_s ?? 0) * 1000] },
  { id: "tokens", title: "Tokens/s (in, out)", series: [field("tokens_in_per_s"), field("tokens_out_per_s")] },
];
const WIDTH = 300;
const HEIGHT = 80;
const SVG = "http://www.w3.org/2000/svg";

let source = null;
let samples = [];

const svg = (tag, attributes = {}) => {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, String(value));
  return element;
};

function build() {
  show("live-charts", CHARTS.map((chart) => {
    const drawing = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-labelledby": `chart-${chart.id}-title`,
      preserveAspectRatio: "none", class: "chart" });
    drawing.append(svg("line", { x1: 0, y1: HEIGHT - 0.5, x2: WIDTH, y2: HEIGHT - 0.5, class: "axis" }));
    chart.series.forEach((_, index) => drawing.append(svg("polyline", { points: "", class: `series s${index}` })));
    return h("figure", { id: `chart-${chart.id}`, class: "chart-box" },
      h("figcaption", { id: `chart-${chart.id}-title` }, chart.title, ": ", h("output", { class: "now" }, "—"),
        h("span", { class: "hint max" }, "")),
      drawing);
  }));
}

const number = (value) => (Number.isFinite(value) ? (Math.abs(value) >= 100 ? value.toFixed(0) : value.toFixed(2).replace(/\.?0+$/, "")) : "—");

function draw() {
  for (const chart of CHARTS) {
    const figure = $(`chart-${chart.id}`);
    const values = chart.series.map((value) => samples.map((sample) => Number(value(sample) ?? 0)));
    const max = Math.max(1e-9, ...values.flat());
    values.forEach((series, index) => {
      const step = WIDTH / (KEEP - 1);
      const offset = KEEP - series.length;
      const points = series.map((value, i) => `${((offset + i) * step).toFixed(1)},${(HEIGHT - 2 - (value / max) * (HEIGHT - 6)).toFixed(1)}`);
      figure.querySelector(`polyline.s${index}`).setAttribute("points", points.join(" "));
    });
    figure.querySelector(".now").textContent = values.map((series) => number(series[series.length - 1])).join(", ");
    figure.querySelector(".max").textContent = ` (max ${number(max)})`;
    figure.dataset.samples = String(samples.length);
  }
}

function open() {
  samples = [];
  build();
  show("live-status", "Connecting…");
  source = new EventSource("api/live");
  source.addEventListener("sample", (event) => {
    let sample;
    try {
      sample = JSON.parse(event.data);
    } catch {
      return;
    }
    samples.push(sample);
    if (samples.length > KEEP) samples.shift();
    show("live-status", "Replica ", h("strong", { id: "live-replica" }, sample.replica ?? "?"),
      ` · ${sample.sessions_active ?? 0} active session(s) · ${new Date(sample.at_ms ?? Date.now()).toLocaleTimeString()}`);
    draw();
  });
  source.addEventListener("error", () => {
    // Closed: the server refused the stream (not available, logged out); else the browser retries.
    if (source?.readyState === EventSource.CLOSED) show("live-status", h("span", { class: "error", role: "alert" },
      "not available: the live stream was refused (api/live); reload the page to retry"));
    else show("live-status", "Disconnected: reconnecting…");
  });
}

export default {
  enter() {
    if (!source) open();
  },
  leave() {
    source?.close();
    source = null;
  },
};

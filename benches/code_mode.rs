//! Code mode's cost: the round trip of an empty `run_code` (start python3,
//! send the code, get `done`, kill the tree) and the extra cost of one nested
//! tool call from the code to a host tool that answers at once.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "measurement code: a setup step that fails leaves nothing to measure, and says why as it panics"
)]

use bub::codemode::RunCode;
use bub::codemode::runner::{CallTool, OutputSink};
use bub::environment::LocalEnvironment;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let environment = Arc::new(LocalEnvironment::new(dir.path(), false).unwrap());
    let call_tool: CallTool = Arc::new(|_, _| Box::pin(async { Ok(json!({"ok": true})) }));
    let write: OutputSink = Arc::new(|_| {});
    let tools = vec!["noop".to_string()];
    let mut group = c.benchmark_group("run_code");
    group.sample_size(20).measurement_time(Duration::from_secs(10));
    for (name, code) in [
        ("empty", "pass"),
        ("one_call", "await tools.noop()"),
        ("ten_calls", "for _ in range(10):\n    await tools.noop()"),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| {
                let (environment, call_tool, write, tools) =
                    (environment.clone(), call_tool.clone(), write.clone(), tools.clone());
                async move {
                    environment.run_code(code, &tools, call_tool, write, Duration::from_secs(30)).await.unwrap();
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

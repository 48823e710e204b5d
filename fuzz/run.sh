#!/usr/bin/env bash
# Runs every fuzz target (or the ones named) for SECONDS each, one after the
# other, and prints what each did. Exits non-zero when a target crashed; the
# input that crashed it is in fuzz/artifacts/<target>/.
#
#     fuzz/run.sh SECONDS [TARGET...]
#
# Each target starts from its seed corpus (fuzz/corpus/<target>, in git, read
# only) plus what earlier runs found (fuzz/runs/corpus/<target>, not in git);
# new inputs go to the latter. libFuzzer's output is in fuzz/runs/<target>.log.
#
# Needs a nightly toolchain (FUZZ_TOOLCHAIN, default `nightly`); installs
# cargo-fuzz when it is missing. Set FUZZ_NICE=19 to run under `nice`.
set -euo pipefail

if [[ $# -lt 1 || ! $1 =~ ^[0-9]+$ ]]; then
    echo "usage: $0 SECONDS [TARGET...]" >&2
    exit 2
fi
seconds=$1
shift
cd "$(dirname "$0")/.."

toolchain=${FUZZ_TOOLCHAIN:-nightly}
nice_level=${FUZZ_NICE:-0}
if ! cargo "+$toolchain" --version >/dev/null 2>&1; then
    echo "fuzz: no $toolchain toolchain; install it with: rustup toolchain install $toolchain" >&2
    exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

if [[ $# -gt 0 ]]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo "+$toolchain" fuzz list)
fi

# The same flags for build and run, or `run` rebuilds everything. No
# sanitizer: the code under test is safe Rust, where ASan finds nothing that a
# panic would not, and it halves the speed. Debug assertions (overflow checks)
# are on, as by default.
flags=(--sanitizer none --debug-assertions)
fuzz() {
    nice -n "$nice_level" cargo "+$toolchain" fuzz "$@"
}

build_start=$SECONDS
# `build` takes one target or all of them.
if [[ ${#targets[@]} -eq 1 ]]; then
    fuzz build "${flags[@]}" "${targets[0]}"
else
    fuzz build "${flags[@]}"
fi
echo "fuzz: built in $((SECONDS - build_start)) s"

mkdir -p fuzz/runs
failed=()
summary=()
for target in "${targets[@]}"; do
    found=fuzz/runs/corpus/$target
    log=fuzz/runs/$target.log
    mkdir -p "$found" "fuzz/artifacts/$target"
    echo "fuzz: $target for $seconds s"
    status=0
    fuzz run "${flags[@]}" "$target" "$found" "fuzz/corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -print_final_stats=1 >"$log" 2>&1 || status=$?

    # libFuzzer's final stats and its last status line (`#N DONE cov: C ft: F corp: …`).
    stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
    execs=$(stat number_of_executed_units)
    rate=$(stat average_exec_per_sec)
    new=$(stat new_units_added)
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" | tail -1 || true)
    line="$target: ${execs:-?} execs, ${rate:-?} exec/s, ${cov:-no coverage line}, ${new:-?} new units"
    if [[ $status -ne 0 ]]; then
        artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        line="$line, CRASH (exit $status): ${artifact:-see $log}"
        failed+=("$target")
        grep -m1 -E "panicked at|ERROR: libFuzzer|==[0-9]+== ERROR" "$log" >&2 || tail -20 "$log" >&2
    else
        line="$line, no findings"
    fi
    echo "fuzz: $line"
    summary+=("$line")
done

echo
echo "fuzz summary ($seconds s per target):"
printf '  %s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz: crashes in ${failed[*]}; inputs in fuzz/artifacts/<target>/," \
        "reproduce with: cargo +$toolchain fuzz run ${flags[*]} <target> <input>" >&2
    exit 1
fi

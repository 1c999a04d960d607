//! Criterion benches: every allocator side by side in one run.
//!
//! Measurement times are short (the whole suite is meant to finish in about
//! ten minutes on 2 cores); use the showdown binary for the full picture.
//! `iter_custom` hands the iteration count to the workload, so the harness adds
//! no per-iteration closure call to the measured time.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nodalloc_bench::suites::rust::cases::SINGLE_SIZES;
use nodalloc_bench::{with_allocator, workloads, Allocator};
use std::time::{Duration, Instant};

fn configure() -> Criterion {
    Criterion::default()
        .measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300))
        .sample_size(20)
}

fn single_size(c: &mut Criterion) {
    let mut g = c.benchmark_group("single_size");
    g.throughput(Throughput::Elements(1));
    for size in SINGLE_SIZES {
        for alloc in Allocator::available() {
            g.bench_with_input(BenchmarkId::new(alloc.name(), size), &size, |b, &size| {
                with_allocator!(alloc, |a| b.iter_custom(|iters| {
                    let t = Instant::now();
                    workloads::single_size(a, size, iters);
                    t.elapsed()
                }))
            });
        }
    }
    g.finish();
}

fn bulk(c: &mut Criterion) {
    const N: usize = 1000;
    let mut g = c.benchmark_group("bulk_1000");
    g.throughput(Throughput::Elements(N as u64));
    for size in [16usize, 256, 4096] {
        for alloc in Allocator::available() {
            g.bench_with_input(BenchmarkId::new(alloc.name(), size), &size, |b, &size| {
                with_allocator!(alloc, |a| b.iter_custom(|iters| {
                    let t = Instant::now();
                    workloads::bulk(a, N, size, iters);
                    t.elapsed()
                }))
            });
        }
    }
    g.finish();
}

fn threads(c: &mut Criterion) {
    const OPS: u64 = 10_000;
    let mut g = c.benchmark_group("threads_10k_ops");
    for t in [2usize, 4, 8] {
        g.throughput(Throughput::Elements(OPS * t as u64));
        for alloc in Allocator::available() {
            g.bench_with_input(BenchmarkId::new(alloc.name(), t), &t, |b, &t| {
                with_allocator!(alloc, |a| b.iter(|| workloads::threads(a, t, OPS)))
            });
        }
    }
    g.finish();
}

fn producer_consumer(c: &mut Criterion) {
    const N: u64 = 10_000;
    let mut g = c.benchmark_group("producer_consumer_10k");
    g.throughput(Throughput::Elements(N));
    for alloc in Allocator::available() {
        g.bench_function(alloc.name(), |b| {
            with_allocator!(alloc, |a| b.iter(|| workloads::producer_consumer(a, N)))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = configure();
    targets = single_size, bulk, threads, producer_consumer
}
criterion_main!(benches);

//! Device work awaited from async code: a toy inference service on one thread.
//!
//! ```text
//! cargo run --release --example async_service                      # GPU_DEVICE, else auto
//! cargo run --release --example async_service -- --device cpu
//! ```
//!
//! A tokio current-thread runtime (one thread) serves 64 requests at once. Each request
//! has its own stream: it uploads its logits (`upload`, then `.await` on the copy), runs a
//! softmax over its rows on the device, and downloads the probabilities (`.await` on the
//! download, which hands the pinned buffer back). While one request's work runs on the
//! device, the thread serves the others: nothing blocks it (the futures are woken by the
//! backend: the CPU backend's worker, a CUDA host function, or on Vulkan a waiting thread
//! of gpukit's). The library depends on no runtime; tokio is this example's choice.
//!
//! Checked: every request's probabilities against a softmax on the host (within 1e-5), and
//! that the thread served other requests while each waited (the requests finish in another
//! order than they started, or overlap).

use std::cell::Cell;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Instant;

use gpukit::{Context, DeviceSpec, HostUse, Shape};
use gpukit_examples::cli::{self, Cli, CliError, Long, ANY_DEVICE};

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Requests served at once.
const REQUESTS: usize = 64;
/// Rows and classes of each request's logits.
const ROWS: usize = 256;
const CLASSES: usize = 1000;

const USAGE: &str = "\
usage: async_service [options]

  --device SPEC  auto | cpu | cpu:N | cuda[:N] | vulkan[:N] (default: GPU_DEVICE, else auto)
  -h, --help     this text";

fn main() -> ExitCode {
    gpukit_examples::exit_status("async_service", run())
}

fn parse_args(cli: &mut Cli) -> Result<Option<DeviceSpec>, CliError> {
    let mut device = None;
    while let Some(arg) = cli.next_arg()? {
        match arg {
            Long("device") => device = Some(cli.device("--device", ANY_DEVICE, |_| true)?),
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(device)
}

/// The logits of request `r`: a deterministic pattern, different for each request.
fn logits(r: usize) -> Vec<f32> {
    (0..ROWS * CLASSES)
        .map(|i| (((i * 7919 + r * 104_729) % 2003) as f32 / 2003.0 - 0.5) * 8.0)
        .collect()
}

/// Softmax of each row on the host, in f64.
fn softmax_host(x: &[f32]) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(CLASSES) {
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
        let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
        out.extend(row.iter().map(|&v| (v as f64 - max).exp() / sum));
    }
    out
}

/// One request: upload, softmax, download, each awaited; returns the probabilities.
async fn serve(
    ctx: &Context,
    r: usize,
    in_flight: &Cell<usize>,
    overlap: &Cell<usize>,
) -> Res<Vec<f32>> {
    in_flight.set(in_flight.get() + 1);
    overlap.set(overlap.get().max(in_flight.get()));
    let stream = ctx.create_stream()?;
    let mut host = ctx.alloc_host::<f32>(ROWS * CLASSES, HostUse::Both)?;
    host.copy_from_slice(&logits(r));
    let mut x = ctx.alloc::<f32>(ROWS * CLASSES)?;
    let mut p = ctx.alloc::<f32>(ROWS * CLASSES)?;
    let host = stream
        .upload(host, &mut x)
        .map_err(|r| r.error)?
        .await
        .map_err(|r| r.error)?;
    stream.softmax(Shape::new(ROWS, CLASSES), &x, &mut p)?;
    let back = stream
        .download(&p, host)
        .map_err(|r| r.error)?
        .await
        .map_err(|r| r.error)?;
    in_flight.set(in_flight.get() - 1);
    Ok(back.to_vec())
}

fn run() -> Res {
    let device = cli::parse_or_exit("async_service", USAGE, parse_args);
    let ctx = gpukit_examples::open_context(device)?;
    println!(
        "{} device {} ({}): {REQUESTS} requests of {ROWS}x{CLASSES} logits, one thread",
        ctx.backend_name(),
        ctx.device_id(),
        ctx.info().name
    );
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let (in_flight, overlap) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
    let start = Instant::now();
    let results: Vec<Res<Vec<f32>>> = rt.block_on(async {
        let requests = (0..REQUESTS).map(|r| serve(&ctx, r, &in_flight, &overlap));
        futures_join_all(requests).await
    });
    let elapsed = start.elapsed();
    let mut worst = 0.0f64;
    for (r, got) in results.into_iter().enumerate() {
        let got = got?;
        for (a, b) in got.iter().zip(softmax_host(&logits(r))) {
            worst = worst.max((f64::from(*a) - b).abs());
        }
    }
    println!(
        "served in {:.1} ms; at most {} requests in flight at once; largest difference from \
         the host's softmax {worst:.2e}",
        elapsed.as_secs_f64() * 1e3,
        overlap.get()
    );
    ctx.close()?;
    if worst > 1e-5 {
        return Err(format!("a probability is {worst:.2e} off the host's").into());
    }
    if overlap.get() < 2 {
        return Err("the requests never overlapped: an await blocked the thread".into());
    }
    println!("all checks passed");
    Ok(())
}

/// Awaits every future, concurrently on this task, in order of the inputs (a small
/// `join_all`, so that the example needs tokio's runtime alone).
async fn futures_join_all<F: std::future::Future>(
    futs: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let mut futs: Vec<std::pin::Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

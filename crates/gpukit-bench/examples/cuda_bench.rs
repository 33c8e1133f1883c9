//! The CUDA backend against raw cudarc, in the same process on the same buffers.
//!
//! 1. **Transfers**, 4 KiB to 1 GiB, for pageable (`Vec`), pinned (`HostBuffer`, write-combined
//!    for upload) and registered (`Context::register_host`) host memory, upload and
//!    download: the time of `Stream::upload`/`download` between two timing events, against
//!    `cuMemcpyHtoDAsync`/`cuMemcpyDtoHAsync` on a raw stream of the same context, between
//!    two raw events, from and to the same host memory. The two alternate run by run; each
//!    figure is the median of at least 10 runs, and the ratio is raw time / our time
//!    (1.00 = as fast as raw cudarc; the target is >= 0.97 for pinned copies >= 8 MiB).
//! 2. **Enqueue cost**: host time to enqueue a built-in op (`ctx.add` on 1024 f32) against
//!    `cuLaunchKernel` of the very same kernel (gpukit-core's `add`, compiled by the same
//!    NVRTC) with the same grid, 256 launches per run, medians of 21 runs (target <= 1.1x
//!    on a GPU): in a context with one stream, and in one with two (the transfers' stream
//!    exists by then), where every op also records the ordering event that orders the other
//!    streams after it, as in a program with a copy stream, also against `cuLaunchKernel`
//!    followed by `cuEventRecord`; and host time to enqueue an upload of 4 KiB from pinned
//!    memory (`Stream::upload` of a `HostBuffer`, two streams) against `cuMemcpyHtoDAsync`
//!    from the same memory, 64 per run. The same work through cudarc's safe API is measured
//!    too, as a user of cudarc would write it: `CudaStream::launch_builder` of the same
//!    function on `CudaSlice`s (on the context's default stream where ours has one stream;
//!    on a stream of its own, which puts cudarc in its multi-stream mode, where it has two:
//!    there it waits for and records the slices' events around each launch), and
//!    `CudaStream::memcpy_htod` from a `PinnedHostSlice` into a `CudaSlice` (multi-stream).
//!    Each is also given as a difference, nanoseconds per op ours minus the baseline's:
//!    the library's own host cost, which does not depend on the driver's. Every timed run
//!    first blocks its stream with a gate, a host function (`cuLaunchHostFunc`) that sleeps
//!    until the run is timed, so that the work queues up behind it and what is timed is the
//!    enqueue alone: the device (or the emulator's worker, which runs kernels on the host's
//!    cores) does none of it meanwhile, for our loop and the raw one alike. Run against the
//!    CUDA emulator (`cargo xtask cuda-emu run -- cargo run --release --example
//!    cuda_bench`), only that difference means anything (target: at most 250 ns over
//!    cudarc's `launch_builder` and `memcpy_htod`, a tenth of a real launch's enqueue; over
//!    the bare driver calls it is information); the ratios and the transfer figures are the
//!    emulator's. A difference below zero is ours costing less.
//!
//! ```text
//! cargo run --release --example cuda_bench -- [--device cuda|cuda:N] [--json FILE] [--max-mib N] [--runs N] [--require]
//! ```
//!
//! Without a usable GPU it prints `SKIPPED: <the probe's reason>` and exits with status 0
//! (or 1 with `--require`).

use std::ffi::{c_void, CString};
use std::process::ExitCode;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use cudarc::driver::{
    result, sys, CudaContext, CudaFunction, CudaSlice, CudaStream, PinnedHostSlice, PushKernelArg,
};
use gpukit::{Context, DeviceSpec, HostUse, RawStream};
use gpukit_bench::{gbps, write_json};
use gpukit_examples::cli::{self, Cli, CliError, Long};
use gpukit_examples::{fmt_bytes, median};
use serde::Serialize;

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "\
usage: cuda_bench [options]

  --device SPEC  the CUDA device to measure: cuda | cuda:N (default cuda)
  --json FILE    write the records to FILE as JSON
  --max-mib N    the largest transfer, in MiB: 1 to 65536 (default 1024)
  --runs N       runs per transfer size below 256 MiB, at least 10 (default 11); from
                 256 MiB on every size runs 10 times
  --require      exit with status 1, not 0, when no GPU is usable (SKIPPED)
  -h, --help     this text";

struct Args {
    device: DeviceSpec,
    json: Option<String>,
    max_bytes: usize,
    runs: usize,
    require: bool,
}

fn parse_args(cli: &mut Cli) -> Result<Args, CliError> {
    let mut args = Args {
        device: DeviceSpec::Cuda(None),
        json: None,
        max_bytes: 1 << 30,
        runs: 11,
        require: false,
    };
    while let Some(arg) = cli.next_arg()? {
        match arg {
            // It measures the CUDA backend against raw CUDA: another device has no baseline.
            Long("device") => {
                args.device = cli.device("--device", "cuda or cuda:N", |spec| {
                    matches!(spec, DeviceSpec::Cuda(_))
                })?
            }
            Long("json") => args.json = Some(cli.string("--json")?),
            Long("max-mib") => {
                args.max_bytes = cli.number::<usize>("--max-mib", "a size in MiB", 1..=65536)? << 20
            }
            Long("runs") => args.runs = cli.number("--runs", "a count", 10..)?,
            Long("require") => args.require = true,
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(args)
}

/// One measurement, as written to the JSON report (`bench` tells the two kinds apart).
#[derive(Serialize)]
#[serde(tag = "bench", rename_all = "lowercase")]
enum Record {
    /// A transfer of `bytes`, ours against raw cudarc.
    Transfer {
        kind: String,
        bytes: usize,
        ours_ms: f64,
        raw_ms: f64,
        ratio_vs_raw: f64,
    },
    /// The host cost of enqueuing one op, ours against the raw driver call.
    Enqueue {
        kind: &'static str,
        ours_us: f64,
        raw_us: f64,
        ratio_vs_raw: f64,
        /// Ours minus raw, in nanoseconds per op: the library's own host cost.
        over_raw_ns: f64,
    },
}

fn main() -> ExitCode {
    let args = cli::parse_or_exit("cuda_bench", USAGE, parse_args);
    let ctx = match Context::new(args.device) {
        Ok(ctx) => ctx,
        Err(e) => {
            println!("SKIPPED: {e}");
            return if args.require {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(&ctx, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cuda_bench: error: {}", gpukit::error_chain(&*e));
            ExitCode::FAILURE
        }
    }
}

/// Raw cudarc objects in the same (primary) context: a stream and two timing events.
struct Raw {
    stream: sys::CUstream,
    start: sys::CUevent,
    end: sys::CUevent,
}

impl Raw {
    fn new() -> Res<Raw> {
        Ok(Raw {
            stream: result::stream::create(result::stream::StreamKind::NonBlocking)?,
            start: result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?,
            end: result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?,
        })
    }

    /// Milliseconds `f` takes on the raw stream, between two events.
    fn time(&self, f: impl FnOnce(sys::CUstream) -> Res) -> Res<f64> {
        // SAFETY: live events and stream of the current context.
        unsafe { result::event::record(self.start, self.stream)? };
        f(self.stream)?;
        // SAFETY: as above; the elapsed time is read after the end event completed.
        unsafe {
            result::event::record(self.end, self.stream)?;
            result::event::synchronize(self.end)?;
            Ok(f64::from(result::event::elapsed(self.start, self.end)?))
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: the stream is idle (every timing synchronised on its end event); each
        // object is destroyed once.
        unsafe {
            let _ = result::event::destroy(self.start);
            let _ = result::event::destroy(self.end);
            let _ = result::stream::destroy(self.stream);
        }
    }
}

/// A raw device allocation, freed on drop.
struct RawBuf(sys::CUdeviceptr);

impl Drop for RawBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_sync; every copy into it was synchronised.
        let _ = unsafe { result::free_sync(self.0) };
    }
}

/// Whether the timed run has opened the gate, and the gate's wake-up.
static GATE: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

/// The gate: a host function that holds its stream, asleep, until [`open_gate`]. It calls
/// no CUDA (a host function must not).
extern "C" fn gate(_: *mut c_void) {
    let mut open = GATE.0.lock().unwrap_or_else(|p| p.into_inner());
    while !*open {
        open = GATE.1.wait(open).unwrap_or_else(|p| p.into_inner());
    }
}

/// Closes the gate and queues it on the raw `stream`: what is queued after it waits.
fn close_gate(stream: sys::CUstream) -> Res {
    *GATE.0.lock().unwrap_or_else(|p| p.into_inner()) = false;
    // SAFETY: a live stream of the current context; `gate` ignores its argument.
    unsafe { result::stream::launch_host_function(stream, gate, std::ptr::null_mut())? };
    Ok(())
}

/// [`close_gate`] on `stream`, through its raw handle; `any` is an array of its context,
/// only ordered (read) by the call.
fn close_stream_gate(stream: &gpukit::Stream, any: &gpukit::GpuArray<f32>) -> Res {
    // SAFETY: the closure reads nothing and queues only the gate, on the stream given.
    unsafe {
        stream.with_raw(any, |_, raw| match raw {
            RawStream::Cuda(s) => close_gate(s.cast()),
            _ => Err("a CUDA context without a CUDA stream".into()),
        })?
    }
}

/// Opens the gate: the stream it holds runs what was queued behind it.
fn open_gate() {
    *GATE.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
    GATE.1.notify_all();
}

/// Median of `runs` alternating timings in milliseconds: `f(false)` is ours, `f(true)` raw.
fn alternate(runs: usize, mut f: impl FnMut(bool) -> Res<f64>) -> Res<(f64, f64)> {
    f(false)?;
    f(true)?;
    let (mut a, mut b) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        a.push(f(false)?);
        b.push(f(true)?);
    }
    Ok((
        median(&mut a).unwrap_or(f64::NAN),
        median(&mut b).unwrap_or(f64::NAN),
    ))
}

fn run(ctx: &Context, args: &Args) -> Res {
    let info = ctx.info();
    println!(
        "cuda_bench: {} (device {}, compute capability {:?}, {} copy engines)",
        info.name,
        ctx.device_id(),
        info.compute_capability.unwrap_or((0, 0)),
        info.copy_engines
    );
    let mut records = Vec::new();
    transfers(ctx, args, &mut records)?;
    enqueue(ctx, &mut records)?;
    if let Some(path) = &args.json {
        write_json(path, &records)?;
        println!("wrote {} records to {path}", records.len());
    }
    Ok(())
}

const KINDS: [&str; 3] = ["pageable", "pinned", "registered"];

fn transfers(ctx: &Context, args: &Args, records: &mut Vec<Record>) -> Res {
    println!(
        "\ntransfers: raw cudarc time / our time (1.00 = equal), medians of {} runs",
        args.runs
    );
    println!(
        "{:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12}",
        "size", "up page", "up pin", "up reg", "down page", "down pin", "down reg", "pin up GB/s"
    );
    let s = ctx.create_stream()?;
    let raw = Raw::new()?;
    let mut large: Vec<(String, f64)> = Vec::new();
    let mut bytes = 4usize << 10;
    while bytes <= args.max_bytes {
        let n = bytes / 4;
        let runs = if bytes >= 256 << 20 { 10 } else { args.runs };
        let mut dev = ctx.alloc_zeros::<f32>(n)?;
        // SAFETY: the context is current on this thread (the facade bound it).
        let raw_dev = RawBuf(unsafe { result::malloc_sync(bytes)? });

        let mut row = Vec::new();
        let mut pin_up_gbps = 0.0;
        for dir in ["upload", "download"] {
            for kind in KINDS {
                // One host buffer of each kind, used by both sides.
                let mut host_vec: Option<Vec<f32>> = None;
                let mut host_buf: Option<gpukit::HostBuffer<f32>> = None;
                match kind {
                    "pageable" => host_vec = Some(vec![1.0f32; n]),
                    "pinned" => {
                        let usage = if dir == "upload" {
                            HostUse::Upload
                        } else {
                            HostUse::Download
                        };
                        let mut h = ctx.alloc_host::<f32>(n, usage)?;
                        h.fill(1.0);
                        host_buf = Some(h);
                    }
                    _ => host_buf = Some(ctx.register_host(vec![1.0f32; n])?),
                }
                let (ours, theirs) = alternate(runs, |raw_side| {
                    if !raw_side {
                        let start = s.record_event()?;
                        if dir == "upload" {
                            if let Some(h) = host_vec.take() {
                                let p = s.upload(h, &mut dev)?;
                                let end = s.record_event()?;
                                host_vec = Some(p.wait()?);
                                return Ok(start.elapsed_ms(&end)?);
                            }
                            let h = host_buf.take().ok_or("host buffer lost")?;
                            let p = s.upload(h, &mut dev)?;
                            let end = s.record_event()?;
                            host_buf = Some(p.wait()?);
                            Ok(start.elapsed_ms(&end)?)
                        } else {
                            if let Some(h) = host_vec.take() {
                                let p = s.download(&dev, h)?;
                                let end = s.record_event()?;
                                host_vec = Some(p.wait()?);
                                return Ok(start.elapsed_ms(&end)?);
                            }
                            let h = host_buf.take().ok_or("host buffer lost")?;
                            let p = s.download(&dev, h)?;
                            let end = s.record_event()?;
                            host_buf = Some(p.wait()?);
                            Ok(start.elapsed_ms(&end)?)
                        }
                    } else {
                        raw.time(|stream| {
                            let slice: &mut [f32] = match (&mut host_vec, &mut host_buf) {
                                (Some(v), _) => &mut v[..],
                                (None, Some(h)) => &mut h[..],
                                _ => return Err("host buffer lost".into()),
                            };
                            // SAFETY: `raw_dev` holds `bytes` bytes; the host slice has as many
                            // and stays untouched until `time` has synchronised the stream.
                            unsafe {
                                if dir == "upload" {
                                    result::memcpy_htod_async(raw_dev.0, slice, stream)?;
                                } else {
                                    result::memcpy_dtoh_async(slice, raw_dev.0, stream)?;
                                }
                            }
                            Ok(())
                        })
                    }
                })?;
                let ratio = theirs / ours;
                if dir == "upload" && kind == "pinned" {
                    pin_up_gbps = gbps(bytes, ours / 1e3);
                }
                row.push(ratio);
                let name = format!("{dir}_{kind}");
                if bytes >= 8 << 20 {
                    large.push((name.clone(), ratio));
                }
                records.push(Record::Transfer {
                    kind: name,
                    bytes,
                    ours_ms: ours,
                    raw_ms: theirs,
                    ratio_vs_raw: ratio,
                });
            }
        }
        println!(
            "{:>10} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>12.2}",
            fmt_bytes(bytes),
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            row[5],
            pin_up_gbps
        );
        bytes *= 4;
    }
    if !large.is_empty() {
        println!("median ratio vs raw cudarc at >= 8 MiB (target >= 0.97 for pinned):");
        for dir in ["upload", "download"] {
            for kind in KINDS {
                let name = format!("{dir}_{kind}");
                let mut r: Vec<f64> = large
                    .iter()
                    .filter(|(k, _)| *k == name)
                    .map(|(_, r)| *r)
                    .collect();
                if let Some(m) = median(&mut r) {
                    println!("  {name:<20} {m:.3}x");
                }
            }
        }
    }
    s.sync()?;
    Ok(())
}

/// Launches per timed run of the enqueue benchmark.
const LAUNCHES: usize = 256;

/// One context's arrays for the add enqueue benchmark: `out = a + b` over `n` f32.
struct AddArrays {
    a: gpukit::GpuArray<f32>,
    b: gpukit::GpuArray<f32>,
    out: gpukit::GpuArray<f32>,
}

impl AddArrays {
    fn new(ctx: &Context, n: usize) -> Res<Self> {
        let mut arrays = AddArrays {
            a: ctx.alloc_upload(&vec![1.0f32; n])?,
            b: ctx.alloc_upload(&vec![2.0f32; n])?,
            out: ctx.alloc_zeros::<f32>(n)?,
        };
        // Compiles and loads the f32 module.
        ctx.add(&arrays.a, &arrays.b, &mut arrays.out)?;
        ctx.sync()?;
        Ok(arrays)
    }

    /// Seconds per `ctx.add` over [`LAUNCHES`] of them, queued behind the gate (then opens
    /// it and waits for them).
    fn time(&mut self, ctx: &Context) -> Res<f64> {
        close_stream_gate(ctx.default_stream(), &self.a)?;
        let t = Instant::now();
        for _ in 0..LAUNCHES {
            ctx.add(&self.a, &self.b, &mut self.out)?;
        }
        let took = t.elapsed().as_secs_f64();
        open_gate();
        ctx.sync()?;
        Ok(took / LAUNCHES as f64)
    }

    fn check(&self) -> Res {
        if self.out.download()?.iter().any(|&v| v != 3.0) {
            return Err("add produced wrong results".into());
        }
        Ok(())
    }
}

/// The add through cudarc's safe API: its own handle on the device's primary context (so
/// that its stream mode is its own), a stream, the function and `CudaSlice`s.
struct SafeAdd {
    stream: Arc<CudaStream>,
    func: CudaFunction,
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    out: CudaSlice<f32>,
    /// The fault record the kernel takes, passed as its address (nothing tracks it, as in
    /// gpukit, where kernels only claim it atomically).
    faults: CudaSlice<u32>,
    grid: u32,
}

impl SafeAdd {
    /// On the context's default stream (`several: false`: cudarc's one-stream mode, no
    /// events) or on a stream of its own (its multi-stream mode: events around each use).
    fn new(
        device: usize,
        image: &[u8],
        name: &str,
        n: usize,
        grid: u32,
        several: bool,
    ) -> Res<Self> {
        let cu = CudaContext::new(device)?;
        let stream = if several {
            cu.new_stream()?
        } else {
            cu.default_stream()
        };
        let module = cu.load_module(cudarc::nvrtc::Ptx::from_binary(image.to_vec()))?;
        let func = module.load_function(name)?;
        Ok(SafeAdd {
            a: stream.clone_htod(&vec![1.0f32; n])?,
            b: stream.clone_htod(&vec![2.0f32; n])?,
            out: stream.alloc_zeros::<f32>(n)?,
            faults: stream.alloc_zeros::<u32>(16)?,
            stream,
            func,
            grid,
        })
    }

    /// Seconds per launch over [`LAUNCHES`] of them, queued behind the gate.
    fn time(&mut self) -> Res<f64> {
        let (mode, cols, tag) = (0u32, 1u32, 0u32);
        let bytes = (self.out.len() * 4) as u64;
        let faults = {
            let (ptr, _sync) = cudarc::driver::DevicePtr::device_ptr(&self.faults, &self.stream);
            ptr
        };
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (self.grid, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        close_gate(self.stream.cu_stream())?;
        let t = Instant::now();
        for _ in 0..LAUNCHES {
            let mut b = self.stream.launch_builder(&self.func);
            b.arg(&self.a)
                .arg(&self.b)
                .arg(&mode)
                .arg(&cols)
                .arg(&mut self.out);
            b.arg(&bytes).arg(&bytes).arg(&bytes).arg(&tag).arg(&faults);
            // SAFETY: as the raw launch in `enqueue`: `binary_add` over three live slices of
            // `n` floats, mode 0, and a live fault record the unchecked code never writes.
            unsafe { b.launch(cfg)? };
        }
        let took = t.elapsed().as_secs_f64();
        open_gate();
        self.stream.synchronize()?;
        Ok(took / LAUNCHES as f64)
    }

    fn check(&self) -> Res {
        if self.stream.clone_dtoh(&self.out)?.iter().any(|&v| v != 3.0) {
            return Err("cudarc's launches produced wrong results".into());
        }
        Ok(())
    }
}

/// Host time to enqueue `ctx.add` on 1024 f32 against `cuLaunchKernel` of the same
/// kernel: in `ctx`, whose transfer benchmark created a second stream (each op also
/// records the event that orders the other streams after it), and in a fresh context with
/// one stream; then the upload figure.
fn enqueue(ctx: &Context, records: &mut Vec<Record>) -> Res {
    let n = 1024usize;
    let mut several = AddArrays::new(ctx, n)?;
    let one = Context::new(DeviceSpec::Cuda(Some(ctx.device_id())))?;
    let mut alone = AddArrays::new(&one, n)?;

    // The same kernel, raw: gpukit-core's `add` kernel for f32, as a release build
    // launches it, compiled by the same NVRTC with the same options.
    let cc = ctx.info().compute_capability.unwrap_or((0, 0));
    let nvrtc = gpukit_cuda_sys::nvrtc::nvrtc(None)?;
    let (name, src) = gpukit::core::__binary_kernel_cuda(gpukit::BinaryOp::Add, gpukit::DType::F32);
    let (image, _) = gpukit::cuda::cache::compile(
        nvrtc,
        &src,
        &name,
        nvrtc.target_for(cc),
        gpukit::cuda::GENERATED_OPTIONS,
    )?;
    // SAFETY: the context is current; the image is a cubin or NUL-terminated PTX.
    let module = unsafe { result::module::load_data(image.image.as_ptr().cast())? };
    // SAFETY: a live module.
    let func = unsafe { result::module::get_function(module, CString::new(name.as_str())?)? };
    let raw = Raw::new()?;
    // SAFETY: the context is current.
    let bufs = unsafe {
        [
            result::malloc_sync(n * 4)?,
            result::malloc_sync(n * 4)?,
            result::malloc_sync(n * 4)?,
            result::malloc_sync(64)?,
        ]
    };
    let bufs = bufs.map(RawBuf);
    let grid = (n.div_ceil(256) as u32).min(ctx.info().multiprocessors * 32);

    // cudarc's safe API, in its one-stream and its multi-stream mode.
    let mut builder_one = SafeAdd::new(ctx.device_id(), &image.image, &name, n, grid, false)?;
    let mut builder_two = SafeAdd::new(ctx.device_id(), &image.image, &name, n, grid, true)?;
    // The ordering event a context with several streams records after each op, raw.
    let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
    let (mut ours, mut ours_one, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    let (mut theirs_evented, mut builder_ones, mut builder_twos) =
        (Vec::new(), Vec::new(), Vec::new());
    for run in 0..22 {
        let t_ours = several.time(ctx)?;
        let t_one = alone.time(&one)?;
        let t_builder_one = builder_one.time()?;
        let t_builder_two = builder_two.time()?;

        let (pa, pb, po, faults) = (bufs[0].0, bufs[1].0, bufs[2].0, bufs[3].0);
        let (mode, cols, bytes, tag) = (0u32, 1u32, (n * 4) as u64, 0u32);
        close_gate(raw.stream)?;
        let t = Instant::now();
        for _ in 0..LAUNCHES {
            let mut params = raw_params(&pa, &pb, &mode, &cols, &po, &bytes, &tag, &faults);
            // SAFETY: `binary_add(const float*, const float*, unsigned mode, unsigned cols,
            // float*, three byte lengths, unsigned tag, unsigned *faults)` with three live
            // buffers of n floats, mode 0 (element-wise: `cols` unused) and a live fault
            // record the unchecked code never writes; the parameters outlive the call.
            unsafe {
                result::launch_kernel(func, (grid, 1, 1), (256, 1, 1), 0, raw.stream, &mut params)?
            };
        }
        let t_raw = t.elapsed().as_secs_f64();
        open_gate();
        // SAFETY: a live stream.
        unsafe { result::stream::synchronize(raw.stream)? };
        // The same launches, each followed by a raw cuEventRecord of one event.
        close_gate(raw.stream)?;
        let t = Instant::now();
        for _ in 0..LAUNCHES {
            let mut params = raw_params(&pa, &pb, &mode, &cols, &po, &bytes, &tag, &faults);
            // SAFETY: as above; `event` is a live event of this context.
            unsafe {
                result::launch_kernel(func, (grid, 1, 1), (256, 1, 1), 0, raw.stream, &mut params)?;
                result::event::record(event, raw.stream)?;
            }
        }
        let t_evented = t.elapsed().as_secs_f64();
        open_gate();
        // SAFETY: a live stream.
        unsafe { result::stream::synchronize(raw.stream)? };
        if run > 0 {
            ours.push(t_ours);
            ours_one.push(t_one);
            theirs.push(t_raw / LAUNCHES as f64);
            theirs_evented.push(t_evented / LAUNCHES as f64);
            builder_ones.push(t_builder_one);
            builder_twos.push(t_builder_two);
        }
    }
    several.check()?;
    alone.check()?;
    builder_one.check()?;
    builder_two.check()?;
    // SAFETY: the stream that used it is synchronised; destroyed once.
    unsafe { result::event::destroy(event)? };
    println!();
    records.push(enqueue_figure(
        "add_f32_1024",
        "ctx.add on 1024 f32 (2 streams)",
        "raw cuLaunchKernel",
        " (target <= 1.1x)",
        (&mut ours.clone(), &mut theirs.clone()),
    ));
    records.push(enqueue_figure(
        "add_f32_1024_vs_evented",
        "ctx.add on 1024 f32 (2 streams)",
        "raw cuLaunchKernel + cuEventRecord",
        "",
        (&mut ours, &mut theirs_evented),
    ));
    records.push(enqueue_figure(
        "add_f32_1024_vs_builder",
        "ctx.add on 1024 f32 (2 streams)",
        "cudarc launch_builder (2 streams)",
        "",
        (&mut ours.clone(), &mut builder_twos),
    ));
    records.push(enqueue_figure(
        "add_f32_1024_one_stream_vs_builder",
        "ctx.add on 1024 f32 (1 stream)",
        "cudarc launch_builder (1 stream)",
        "",
        (&mut ours_one.clone(), &mut builder_ones),
    ));
    records.push(enqueue_figure(
        "add_f32_1024_one_stream",
        "ctx.add on 1024 f32 (1 stream)",
        "raw cuLaunchKernel",
        " (target <= 1.1x)",
        (&mut ours_one, &mut theirs),
    ));
    drop(bufs);
    // SAFETY: the raw stream is idle; the module is unloaded once.
    unsafe { result::module::unload(module)? };
    upload_enqueue(ctx, &raw, records)
}

/// The parameters of the raw `binary_add` launch, pointing at the caller's values.
#[allow(clippy::too_many_arguments)]
fn raw_params(
    pa: &u64,
    pb: &u64,
    mode: &u32,
    cols: &u32,
    po: &u64,
    bytes: &u64,
    tag: &u32,
    faults: &u64,
) -> [*mut c_void; 10] {
    let p = |x: *const u8| x.cast_mut().cast::<c_void>();
    [
        p((pa as *const u64).cast()),
        p((pb as *const u64).cast()),
        p((mode as *const u32).cast()),
        p((cols as *const u32).cast()),
        p((po as *const u64).cast()),
        p((bytes as *const u64).cast()),
        p((bytes as *const u64).cast()),
        p((bytes as *const u64).cast()),
        p((tag as *const u32).cast()),
        p((faults as *const u64).cast()),
    ]
}

/// Uploads per timed run of the upload enqueue benchmark, each of [`UPLOAD_BYTES`].
const UPLOADS: usize = 64;
/// The size of each upload of the upload enqueue benchmark.
const UPLOAD_BYTES: usize = 4 << 10;

/// The uploads through cudarc's safe API: its own handle on the primary context, a stream
/// of its own (its multi-stream mode), pinned host slices and device slices.
struct SafeUploads {
    stream: Arc<CudaStream>,
    hosts: Vec<PinnedHostSlice<f32>>,
    devs: Vec<CudaSlice<f32>>,
}

impl SafeUploads {
    fn new(device: usize, n: usize) -> Res<Self> {
        let cu = CudaContext::new(device)?;
        let stream = cu.new_stream()?;
        let (mut hosts, mut devs) = (Vec::with_capacity(UPLOADS), Vec::with_capacity(UPLOADS));
        for i in 0..UPLOADS {
            // SAFETY: every element is written below before any is read.
            let mut h = unsafe { cu.alloc_pinned::<f32>(n)? };
            h.as_mut_slice()?.fill(i as f32);
            hosts.push(h);
            devs.push(stream.alloc_zeros::<f32>(n)?);
        }
        Ok(SafeUploads {
            stream,
            hosts,
            devs,
        })
    }

    /// Seconds per `memcpy_htod` over [`UPLOADS`] of them, queued behind the gate.
    fn time(&mut self) -> Res<f64> {
        close_gate(self.stream.cu_stream())?;
        let t = Instant::now();
        for (h, d) in self.hosts.iter().zip(self.devs.iter_mut()) {
            self.stream.memcpy_htod(h, d)?;
        }
        let took = t.elapsed().as_secs_f64();
        open_gate();
        self.stream.synchronize()?;
        Ok(took / UPLOADS as f64)
    }

    fn check(&self) -> Res {
        for (i, d) in self.devs.iter().enumerate() {
            if self.stream.clone_dtoh(d)?.iter().any(|&v| v != i as f32) {
                return Err("a cudarc upload delivered the wrong values".into());
            }
        }
        Ok(())
    }
}

/// Host time to enqueue a 4 KiB upload from pinned memory: `Stream::upload` of a
/// `HostBuffer` against `cuMemcpyHtoDAsync` from the same memory, and against cudarc's
/// `memcpy_htod` from a `PinnedHostSlice`.
fn upload_enqueue(ctx: &Context, raw: &Raw, records: &mut Vec<Record>) -> Res {
    let n = UPLOAD_BYTES / 4;
    let s = ctx.create_stream()?;
    let mut hosts = Vec::with_capacity(UPLOADS);
    let mut devs = Vec::with_capacity(UPLOADS);
    let mut raw_devs = Vec::with_capacity(UPLOADS);
    for i in 0..UPLOADS {
        let mut h = ctx.alloc_host::<f32>(n, HostUse::Upload)?;
        h.fill(i as f32);
        hosts.push(h);
        devs.push(ctx.alloc_zeros::<f32>(n)?);
        // SAFETY: the context is current on this thread.
        raw_devs.push(RawBuf(unsafe { result::malloc_sync(UPLOAD_BYTES)? }));
    }
    let mut safe = SafeUploads::new(ctx.device_id(), n)?;
    let (mut ours, mut theirs, mut safes) = (Vec::new(), Vec::new(), Vec::new());
    let any = ctx.alloc_zeros::<f32>(1)?;
    for run in 0..22 {
        let t_safe = safe.time()?;
        close_stream_gate(&s, &any)?;
        let t = Instant::now();
        let mut pending = Vec::with_capacity(UPLOADS);
        for (h, d) in hosts.drain(..).zip(devs.iter_mut()) {
            pending.push(s.upload(h, d)?);
        }
        let t_ours = t.elapsed().as_secs_f64();
        open_gate();
        for p in pending {
            hosts.push(p.wait()?);
        }

        close_gate(raw.stream)?;
        let t = Instant::now();
        for (h, d) in hosts.iter().zip(&raw_devs) {
            // SAFETY: `d` holds UPLOAD_BYTES; the pinned host buffer as many, untouched
            // until the stream is synchronised below.
            unsafe { result::memcpy_htod_async(d.0, &h[..], raw.stream)? };
        }
        let t_raw = t.elapsed().as_secs_f64();
        open_gate();
        // SAFETY: a live stream.
        unsafe { result::stream::synchronize(raw.stream)? };
        if run > 0 {
            ours.push(t_ours / UPLOADS as f64);
            theirs.push(t_raw / UPLOADS as f64);
            safes.push(t_safe);
        }
    }
    safe.check()?;
    for (i, d) in devs.iter().enumerate() {
        if d.download()?.iter().any(|&v| v != i as f32) {
            return Err("an upload delivered the wrong values".into());
        }
    }
    records.push(enqueue_figure(
        "upload_pinned_4k_vs_memcpy_htod",
        "pinned upload of 4 KiB",
        "cudarc memcpy_htod (2 streams)",
        "",
        (&mut ours.clone(), &mut safes),
    ));
    records.push(enqueue_figure(
        "upload_pinned_4k",
        "pinned upload of 4 KiB",
        "raw cuMemcpyHtoDAsync",
        "",
        (&mut ours, &mut theirs),
    ));
    Ok(())
}

/// The enqueue figure `kind` from the per-op host times in seconds, ours and raw: their
/// medians, printed as `what` against the raw `call` (with the ratio's `target`, if any).
fn enqueue_figure(
    kind: &'static str,
    what: &str,
    call: &str,
    target: &str,
    (ours, raw): (&mut [f64], &mut [f64]),
) -> Record {
    let (o, r) = (
        median(ours).unwrap_or(f64::NAN),
        median(raw).unwrap_or(f64::NAN),
    );
    // The host-cost target is against cudarc's own API; against the bare driver calls the
    // difference is information.
    let host_target = if call.starts_with("cudarc") {
        " (target <= 250 ns)"
    } else {
        ""
    };
    println!(
        "enqueue: {what} {:.2} us, {call} {:.2} us: {:.3}x{target}; {:.0} ns over it{host_target}",
        o * 1e6,
        r * 1e6,
        o / r,
        (o - r) * 1e9,
    );
    Record::Enqueue {
        kind,
        ours_us: o * 1e6,
        raw_us: r * 1e6,
        ratio_vs_raw: o / r,
        over_raw_ns: (o - r) * 1e9,
    }
}

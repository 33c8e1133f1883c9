//! numpy's side of the gemm comparison: a `python3` child that reports its BLAS and times
//! `a @ b` on the same matrices.

use super::matmul::{gemm_runs, rel_err, within_tol, GemmInput};
use super::*;

/// Why numpy's row is missing: numpy cannot be used here (a skip), or it ran and failed.
pub(super) enum NumpyError {
    Unavailable(String),
    Failed(Box<dyn std::error::Error>),
}

/// The Python side: `probe` imports numpy and reports its BLAS; `time DIR N:RUNS,... THREADS`
/// also times `a @ b` on `DIR/a{N}.f32` and `DIR/b{N}.f32` (little-endian f32, row-major)
/// and writes the product to `DIR/c{N}.f32`, and where torch imports `torch.mm` on THREADS
/// threads into `DIR/t{N}.f32`; `ops` and `math` time the roofline's and the math
/// section's ops through numpy and PyTorch. One JSON object on the last line of stdout.
const NUMPY_SCRIPT: &str = r#"
import json, os, sys, time

def openblas_runtime(path):
    import ctypes
    out = {"library": path}
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        out["error"] = str(e)
        return out
    for what, restype in (("corename", ctypes.c_char_p), ("config", ctypes.c_char_p),
                          ("num_threads", ctypes.c_int), ("parallel", ctypes.c_int)):
        for name in ("openblas_get_" + what, "openblas_get_" + what + "64_",
                     "scipy_openblas_get_" + what, "scipy_openblas_get_" + what + "64_"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = restype
                fn.argtypes = []
                v = fn()
                out[what] = v.decode() if isinstance(v, bytes) else v
                out[what + "_symbol"] = name
                break
    return out

def blas_info(np):
    info = {"numpy": np.__version__, "python": sys.version.split()[0]}
    try:
        cfg = np.show_config(mode="dicts")
    except TypeError:
        cfg = None
    if isinstance(cfg, dict):
        deps = cfg.get("Build Dependencies", {})
        for key in ("blas", "lapack"):
            if key in deps:
                info["build_" + key] = deps[key]
        if "SIMD Extensions" in cfg:
            info["simd_extensions"] = cfg["SIMD Extensions"]
    else:
        import contextlib, io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            np.show_config()
        info["config_lines"] = [l.strip() for l in buf.getvalue().splitlines()
                                if "blas" in l.lower()][:40]
    try:
        from threadpoolctl import threadpool_info
        info["threadpoolctl"] = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    except ImportError:
        info["threadpoolctl"] = "not installed"
    except Exception as e:
        info["threadpoolctl"] = "failed: %s" % e
    loaded = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6:
                    base = os.path.basename(parts[5]).lower()
                    if any(s in base for s in ("blas", "mkl", "blis")) and parts[5] not in loaded:
                        loaded.append(parts[5])
    except OSError:
        pass
    info["blas_libraries_loaded"] = loaded
    for path in loaded:
        if "openblas" in os.path.basename(path).lower():
            info["openblas"] = openblas_runtime(path)
            break
    info["env"] = {k: v for k, v in os.environ.items()
                   if k.startswith(("OPENBLAS", "OMP_", "MKL_", "GOTO"))}
    return info

def timing(np, folder, pairs):
    out = []
    for n, runs in pairs:
        a = np.fromfile(os.path.join(folder, "a%d.f32" % n), dtype="<f4").reshape(n, n)
        b = np.fromfile(os.path.join(folder, "b%d.f32" % n), dtype="<f4").reshape(n, n)
        c = a @ b
        c = a @ b
        ts = []
        for _ in range(runs):
            t = time.perf_counter()
            c = a @ b
            ts.append(time.perf_counter() - t)
        c.astype("<f4").tofile(os.path.join(folder, "c%d.f32" % n))
        ts.sort()
        m = len(ts)
        med = ts[m // 2] if m % 2 else (ts[m // 2 - 1] + ts[m // 2]) / 2
        out.append({"n": n, "runs": runs, "seconds": med, "dtype": str(c.dtype)})
    return out

def torch_timing(np, folder, pairs, threads):
    """`torch.mm(a, b, out=c)` on the same matrices, on `threads` threads, where torch
    imports; each product written to `t{N}.f32`."""
    try:
        import torch
    except Exception as e:
        return {"available": False, "reason": "%s: %s" % (type(e).__name__, e)}
    torch.set_num_threads(threads)
    out = []
    for n, runs in pairs:
        load = lambda name: torch.from_numpy(
            np.fromfile(os.path.join(folder, "%s%d.f32" % (name, n)), dtype="<f4").reshape(n, n))
        a, b = load("a"), load("b")
        c = torch.empty(n, n)
        torch.mm(a, b, out=c)
        torch.mm(a, b, out=c)
        ts = []
        for _ in range(runs):
            t = time.perf_counter()
            torch.mm(a, b, out=c)
            ts.append(time.perf_counter() - t)
        c.numpy().astype("<f4").tofile(os.path.join(folder, "t%d.f32" % n))
        ts.sort()
        m = len(ts)
        med = ts[m // 2] if m % 2 else (ts[m // 2 - 1] + ts[m // 2]) / 2
        out.append({"n": n, "runs": runs, "seconds": med})
    return {"available": True, "version": torch.__version__,
            "threads": torch.get_num_threads(), "results": out}

def median_seconds(f, runs):
    f()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    ts.sort()
    m = len(ts)
    return ts[m // 2] if m % 2 else (ts[m // 2 - 1] + ts[m // 2]) / 2

def numpy_ops(np, n, row, runs):
    """The roofline's ops through numpy, into preallocated outputs where numpy has `out=`."""
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, n).astype(np.float32)
    b = rng.uniform(-1, 1, n).astype(np.float32)
    c = np.empty_like(a)
    x = a.copy()
    sums = np.empty(n // row, dtype=np.float32)
    rows, crows = a.reshape(-1, row), c.reshape(-1, row)
    m = np.empty((n // row, 1), dtype=np.float32)
    def softmax():
        np.max(rows, axis=1, keepdims=True, out=m)
        np.subtract(rows, m, out=crows)
        np.exp(crows, out=crows)
        np.sum(crows, axis=1, keepdims=True, out=m)
        np.divide(crows, m, out=crows)
    ops = {
        "add": lambda: np.add(a, b, out=c),
        "mul_scalar_inplace": lambda: np.multiply(x, np.float32(-1), out=x),
        "relu": lambda: np.maximum(a, np.float32(0), out=c),
        "exp": lambda: np.exp(a, out=c),
        "sum_into": lambda: a.sum(dtype=np.float32),
        "row_sum": lambda: np.sum(rows, axis=1, out=sums),
        "softmax": softmax,
    }
    return {op: median_seconds(f, runs) for op, f in ops.items()}

def torch_ops(torch, n, row, runs):
    """The same through PyTorch's CPU backend (`out=` and in-place forms)."""
    g = torch.Generator().manual_seed(1)
    a = torch.rand(n, generator=g) * 2 - 1
    b = torch.rand(n, generator=g) * 2 - 1
    c = torch.empty_like(a)
    x = a.clone()
    one = torch.empty(())
    sums = torch.empty(n // row)
    rows = a.view(-1, row)
    ops = {
        "add": lambda: torch.add(a, b, out=c),
        "mul_scalar_inplace": lambda: x.mul_(-1.0),
        "relu": lambda: torch.clamp_min(a, 0.0, out=c),
        "exp": lambda: torch.exp(a, out=c),
        "sum_into": lambda: torch.sum(a, dim=0, out=one),
        "row_sum": lambda: torch.sum(rows, dim=1, out=sums),
        # No `out=` form: a new tensor each call, as PyTorch programs write it.
        "softmax": lambda: torch.softmax(rows, dim=1),
    }
    return {op: median_seconds(f, runs) for op, f in ops.items()}

def math_inputs(np, n):
    """What the Rust side passes: x in [-4, 4), and |x| + 1/64 for log, log1p and pow."""
    rng = np.random.default_rng(1)
    a = rng.uniform(-4, 4, n).astype(np.float32)
    return a, (np.abs(a) + np.float32(1 / 64)).astype(np.float32)

def numpy_math(np, n, row, runs):
    """The math ops through numpy: its ufunc where it has one, else as numpy programs write
    them (sigmoid, SiLU, GELU, log-softmax, cross-entropy), into preallocated outputs."""
    a, p = math_inputs(np, n)
    c, t = np.empty_like(a), np.empty_like(a)
    rows, crows, trows = a.reshape(-1, row), c.reshape(-1, row), t.reshape(-1, row)
    m = np.empty((n // row, 1), dtype=np.float32)
    idx = np.arange(n // row)
    labels = (idx * 7) % row
    loss = np.empty(n // row, dtype=np.float32)
    one = np.float32(1)
    def sigmoid(x, out):
        np.negative(x, out=out)
        np.exp(out, out=out)
        np.add(out, one, out=out)
        np.reciprocal(out, out=out)
    def silu():
        sigmoid(a, t)
        np.multiply(a, t, out=c)
    def gelu():
        np.multiply(a, a, out=t)
        np.multiply(t, a, out=t)
        np.multiply(t, np.float32(0.044715), out=t)
        np.add(t, a, out=t)
        np.multiply(t, np.float32(0.7978846), out=t)
        np.tanh(t, out=t)
        np.add(t, one, out=t)
        np.multiply(t, a, out=t)
        np.multiply(t, np.float32(0.5), out=c)
    def log_softmax():
        np.max(rows, axis=1, keepdims=True, out=m)
        np.subtract(rows, m, out=crows)
        np.exp(crows, out=trows)
        np.sum(trows, axis=1, keepdims=True, out=m)
        np.log(m, out=m)
        np.subtract(crows, m, out=crows)
    def cross_entropy():
        log_softmax()
        np.negative(crows[idx, labels], out=loss)
    ops = {
        "log": lambda: np.log(p, out=c),
        "log1p": lambda: np.log1p(p, out=c),
        "tanh": lambda: np.tanh(a, out=c),
        "sigmoid": lambda: sigmoid(a, c),
        "silu": silu,
        "gelu": gelu,
        "softplus": lambda: np.logaddexp(a, np.float32(0), out=c),
        "pow": lambda: np.power(p, np.float32(1.5), out=c),
        "log_softmax": log_softmax,
        "cross_entropy": cross_entropy,
    }
    return {op: median_seconds(f, runs) for op, f in ops.items()}

def torch_math(torch, n, row, runs):
    """The same through PyTorch (its own op for each; `out=` where it has one)."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(1)
    a = torch.rand(n, generator=g) * 8 - 4
    p = a.abs() + 1 / 64
    c = torch.empty_like(a)
    rows = a.view(-1, row)
    labels = (torch.arange(n // row) * 7) % row
    ops = {
        "log": lambda: torch.log(p, out=c),
        "log1p": lambda: torch.log1p(p, out=c),
        "tanh": lambda: torch.tanh(a, out=c),
        "sigmoid": lambda: torch.sigmoid(a, out=c),
        "silu": lambda: F.silu(a),
        "gelu": lambda: F.gelu(a, approximate="tanh"),
        "softplus": lambda: F.softplus(a),
        "pow": lambda: torch.pow(p, 1.5, out=c),
        "log_softmax": lambda: torch.log_softmax(rows, dim=1),
        "cross_entropy": lambda: F.cross_entropy(rows, labels, reduction="none"),
    }
    with torch.no_grad():
        return {op: median_seconds(f, runs) for op, f in ops.items()}

def roofline(np, sizes, row, threads, command):
    numpy_side, torch_side = (numpy_ops, torch_ops) if command == "ops" else (numpy_math, torch_math)
    out = {"numpy": [], "numpy_threads": 1}
    for nbytes, runs in sizes:
        out["numpy"].append({"bytes": nbytes, "seconds": numpy_side(np, nbytes // 4, row, runs)})
    try:
        import torch
    except Exception as e:
        out["torch"] = {"available": False, "reason": "%s: %s" % (type(e).__name__, e)}
        return out
    torch.set_num_threads(threads)
    results = []
    for nbytes, runs in sizes:
        results.append({"bytes": nbytes, "seconds": torch_side(torch, nbytes // 4, row, runs)})
    out["torch"] = {"available": True, "version": torch.__version__,
                    "threads": torch.get_num_threads(), "results": results}
    return out

def main():
    try:
        import numpy as np
    except Exception as e:
        print(json.dumps({"ok": False, "reason": "%s: %s" % (type(e).__name__, e)}))
        return
    result = {"ok": True, "info": blas_info(np)}
    if sys.argv[1] == "time":
        pairs = [tuple(int(x) for x in p.split(":")) for p in sys.argv[3].split(",")]
        result["results"] = timing(np, sys.argv[2], pairs)
        result["torch"] = torch_timing(np, sys.argv[2], pairs, int(sys.argv[4]))
    elif sys.argv[1] in ("ops", "math"):
        sizes = [tuple(int(x) for x in p.split(":")) for p in sys.argv[2].split(",")]
        result["ops"] = roofline(np, sizes, int(sys.argv[3]), int(sys.argv[4]), sys.argv[1])
    print(json.dumps(result, default=str))

main()
"#;

/// A folder removed, with what is in it, when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the Python side with `args`; its JSON answer.
fn python(python: &str, args: &[&str]) -> Result<Value, NumpyError> {
    let out = Command::new(python)
        .arg("-c")
        .arg(NUMPY_SCRIPT)
        .args(args)
        // What OpenBLAS picks for this machine by itself, not a core type forced on it.
        .env_remove("OPENBLAS_CORETYPE")
        .env_remove("OPENBLAS_L2_SIZE")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| NumpyError::Unavailable(format!("cannot run {python}: {e}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or("");
    let answer = serde_json::from_str::<Value>(last).ok();
    match answer {
        Some(v) if out.status.success() => {
            if v["ok"].as_bool() == Some(true) {
                Ok(v)
            } else {
                Err(NumpyError::Unavailable(
                    v["reason"]
                        .as_str()
                        .unwrap_or("numpy did not import")
                        .to_owned(),
                ))
            }
        }
        _ => {
            let why = format!(
                "{python} exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
            Err(if args.first() == Some(&"probe") {
                NumpyError::Unavailable(why)
            } else {
                NumpyError::Failed(why.into())
            })
        }
    }
}

/// Times numpy's `a @ b` on `inputs` and checks its products against the CPU backend's;
/// numpy's BLAS description and its row, and PyTorch's row (`torch.mm` on the machine's
/// threads, its products checked the same way) or why PyTorch was not measured.
pub(super) fn numpy_gemm(
    python_exe: &str,
    inputs: &[GemmInput],
    quick: bool,
) -> Result<(Value, GemmRow, Result<GemmRow, String>), NumpyError> {
    python(python_exe, &["probe"])?;
    let failed = |e: String| NumpyError::Failed(e.into());
    let dir = TempDir(std::env::temp_dir().join(format!("ops_bench_{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).map_err(|e| failed(format!("{}: {e}", dir.0.display())))?;
    let write = |path: &Path, v: &[f32]| {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(path, bytes).map_err(|e| failed(format!("{}: {e}", path.display())))
    };
    let mut pairs = Vec::new();
    for input in inputs {
        let n = input.n;
        write(&dir.0.join(format!("a{n}.f32")), &input.a)?;
        write(&dir.0.join(format!("b{n}.f32")), &input.b)?;
        pairs.push(format!("{n}:{}", gemm_runs(n, quick)));
    }
    let folder = dir.0.to_string_lossy().into_owned();
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let answer = python(
        python_exe,
        &["time", &folder, &pairs.join(","), &cores.to_string()],
    )?;
    let info = answer["info"].clone();
    let threads = info["openblas"]["num_threads"]
        .as_u64()
        .map(|t| t as usize)
        .or_else(|| {
            info["threadpoolctl"]
                .get(0)
                .and_then(|p| p["num_threads"].as_u64())
                .map(|t| t as usize)
        });
    // Each product read back and checked against the reference.
    let results_of = |list: &Value, prefix: &str, who: &str| -> Result<Vec<GemmResult>, String> {
        let mut results = Vec::new();
        for GemmInput { n, reference, .. } in inputs {
            let r = list
                .as_array()
                .and_then(|rs| rs.iter().find(|r| r["n"].as_u64() == Some(*n as u64)))
                .ok_or_else(|| format!("{who} gave no result for n = {n}"))?;
            let path = dir.0.join(format!("{prefix}{n}.f32"));
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let c: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let err = rel_err(&c, reference);
            if !within_tol(err) {
                return Err(format!(
                    "{who}'s product at n = {n}: relative error {err:.2e} > {GEMM_TOL:.0e} against the CPU backend"
                ));
            }
            results.push(GemmResult {
                n: *n,
                runs: r["runs"].as_u64().unwrap_or(0) as usize,
                seconds: r["seconds"].as_f64().unwrap_or(f64::NAN),
                max_rel_err: err,
                checked_against: "cpu backend",
            });
        }
        Ok(results)
    };
    let results = results_of(&answer["results"], "c", "numpy").map_err(failed)?;
    let label = format!(
        "numpy a @ b ({}{})",
        blas_name(&info),
        threads.map_or(String::new(), |t| format!(", {t} threads"))
    );
    let t = &answer["torch"];
    let torch = if t["available"].as_bool() == Some(true) {
        let threads = t["threads"].as_u64().map(|t| t as usize);
        results_of(&t["results"], "t", "torch").map(|results| GemmRow {
            key: "torch",
            label: format!(
                "torch {} torch.mm ({} threads)",
                t["version"].as_str().unwrap_or("?"),
                threads.map_or("?".to_owned(), |t| t.to_string())
            ),
            device: "host".to_owned(),
            threads,
            results,
        })
    } else {
        Err(t["reason"].as_str().unwrap_or("no reason given").to_owned())
    };
    Ok((
        info,
        GemmRow {
            key: "numpy",
            label,
            device: "host".to_owned(),
            threads,
            results,
        },
        torch,
    ))
}

/// The roofline's ops timed through numpy (one thread: its ufuncs have no threads) and,
/// where `import torch` works in the same child, PyTorch's CPU backend on `threads`
/// threads: (size in bytes, op, seconds) for each library, and PyTorch's version and
/// threads or why it was not measured.
pub(super) struct ForeignOps {
    pub numpy: Vec<(usize, String, f64)>,
    pub torch: Vec<(usize, String, f64)>,
    /// `torch 2.x, N threads`, or why PyTorch was not measured.
    pub torch_status: String,
}

pub(super) fn foreign_ops(
    python_exe: &str,
    command: &str,
    sizes: &[(usize, usize)],
    row: usize,
    threads: usize,
) -> Result<ForeignOps, NumpyError> {
    let spec: Vec<String> = sizes.iter().map(|(b, r)| format!("{b}:{r}")).collect();
    let answer = python(
        python_exe,
        &[
            command,
            &spec.join(","),
            &row.to_string(),
            &threads.to_string(),
        ],
    )?;
    let ops = &answer["ops"];
    let read = |list: &Value| -> Vec<(usize, String, f64)> {
        let mut out = Vec::new();
        for entry in list.as_array().into_iter().flatten() {
            let bytes = entry["bytes"].as_u64().unwrap_or(0) as usize;
            if let Some(times) = entry["seconds"].as_object() {
                for (op, t) in times {
                    out.push((bytes, op.clone(), t.as_f64().unwrap_or(f64::NAN)));
                }
            }
        }
        out
    };
    let torch = &ops["torch"];
    let (torch_rows, torch_status) = if torch["available"].as_bool() == Some(true) {
        (
            read(&torch["results"]),
            format!(
                "torch {}, {} threads",
                torch["version"].as_str().unwrap_or("?"),
                torch["threads"].as_u64().unwrap_or(0)
            ),
        )
    } else {
        (
            Vec::new(),
            format!(
                "not available ({})",
                torch["reason"].as_str().unwrap_or("no reason given")
            ),
        )
    };
    Ok(ForeignOps {
        numpy: read(&ops["numpy"]),
        torch: torch_rows,
        torch_status,
    })
}

/// The BLAS library's name (and OpenBLAS's core) from the child's report.
fn blas_name(info: &Value) -> String {
    let name = info["build_blas"]["name"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            info["blas_libraries_loaded"]
                .get(0)
                .and_then(Value::as_str)
                .map(|p| {
                    Path::new(p)
                        .file_name()
                        .map_or(p.to_owned(), |f| f.to_string_lossy().into_owned())
                })
        })
        .unwrap_or_else(|| "BLAS unknown".to_owned());
    match info["openblas"]["corename"].as_str() {
        Some(core) => format!("{name}, core {core}"),
        None => name,
    }
}

/// One line on numpy's BLAS for the console.
pub(super) fn describe_blas(info: &Value) -> String {
    let mut parts = vec![format!("numpy {}", info["numpy"].as_str().unwrap_or("?"))];
    if let Some(b) = info["build_blas"].as_object() {
        let get = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("?");
        parts.push(format!(
            "built with {} {} ({})",
            get("name"),
            get("version"),
            b.get("openblas configuration")
                .and_then(Value::as_str)
                .unwrap_or("no configuration string")
        ));
    } else if let Some(lines) = info["config_lines"].as_array() {
        let lines: Vec<&str> = lines.iter().filter_map(Value::as_str).take(4).collect();
        parts.push(format!("config: {}", lines.join("; ")));
    }
    let ob = &info["openblas"];
    if ob.is_object() {
        parts.push(format!(
            "OpenBLAS at run time: core {}, {} threads, config {:?}",
            ob["corename"].as_str().unwrap_or("?"),
            ob["num_threads"]
                .as_i64()
                .map_or("?".to_owned(), |t| t.to_string()),
            ob["config"].as_str().unwrap_or("?")
        ));
    } else if let Some(libs) = info["blas_libraries_loaded"].as_array() {
        let libs: Vec<&str> = libs.iter().filter_map(Value::as_str).collect();
        parts.push(format!("BLAS libraries loaded: {}", libs.join(", ")));
    }
    if let Some(t) = info["threadpoolctl"].as_array() {
        for p in t {
            parts.push(format!(
                "threadpoolctl: {} {} {} threads, architecture {}",
                p["internal_api"].as_str().unwrap_or("?"),
                p["version"].as_str().unwrap_or("?"),
                p["num_threads"]
                    .as_u64()
                    .map_or("?".to_owned(), |t| t.to_string()),
                p["architecture"].as_str().unwrap_or("?")
            ));
        }
    }
    parts.join("; ")
}

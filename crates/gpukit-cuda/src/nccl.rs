//! NCCL communicators and collectives on raw device pointers: the layer the facade's
//! multi-GPU collectives call.
//!
//! # What runs where
//!
//! - **One process, many GPUs**: [`NcclComm::init_all`] makes one communicator per backend
//!   (rank `i` on `backends[i]`'s device) in one call.
//! - **One process per GPU**: one rank calls [`NcclId::new`], the launcher's bootstrap
//!   (which the facade provides) hands its 128 bytes to every other process, and each
//!   process calls [`NcclComm::init_rank`] with its rank. `init_rank` blocks until every rank
//!   has joined, so one thread initialising several ranks wraps the calls in
//!   [`group_start`]/[`group_end`].
//!
//! A collective is queued on a stream of the communicator's device, like a kernel launch:
//! the call returns once it is queued, the data moves when the stream gets there, and every
//! rank must queue the same collectives in the same order. Calls from one thread between
//! [`group_start`] and [`group_end`] are fused into one launch (needed for
//! [`NcclComm::send`]/[`NcclComm::recv`] pairs that would otherwise wait for each other).
//!
//! # Loading
//!
//! Nothing about NCCL is needed at build time: cudarc's `nccl::sys` binding (NCCL 2.24's
//! API, `nccl-02024`) resolves each entry point at run time. cudarc panics when the library
//! or a symbol is missing, so [`available`] checks once per process that the library loads,
//! has every entry point this module calls (its `SYMBOLS` list) and is NCCL 2.10 or newer
//! (`ncclAvg` and bfloat16); every other function here calls it first and returns its
//! [`Error::Unavailable`] instead of reaching cudarc's loader.
//!
//! cudarc 0.19 looks for the names of [`cudarc::get_lib_name_candidates`]`("nccl")`
//! (`libnccl.so`, ...), which do not include `libnccl.so.2`, the only name the `libnccl2`
//! package and the `nvidia-nccl-cu12` wheel ship; the unversioned `libnccl.so` comes with
//! `libnccl-dev`, or from a link next to `libnccl.so.2`. The error says so.
//!
//! NCCL's own documentation: <https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api.html>.

use std::ffi::{c_int, CStr};
use std::sync::OnceLock;

use cudarc::nccl::sys;
use gpukit_core::{CollectiveOp, DType, Error, Result};

mod comm;
#[cfg(test)]
mod tests;

pub use comm::NcclComm;

/// The oldest NCCL accepted: 2.10 brought `ncclAvg` and bfloat16.
const MIN_VERSION: (u32, u32) = (2, 10);

/// Every NCCL entry point this module calls (`sys::nccl*(` in its source; the unit test
/// `every_nccl_call_is_listed` keeps the two equal), checked by [`available`].
const SYMBOLS: &[&str] = &[
    "ncclGetVersion",
    "ncclGetErrorString",
    "ncclGetUniqueId",
    "ncclCommInitRank",
    "ncclCommInitAll",
    "ncclCommGetAsyncError",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclAllReduce",
    "ncclBroadcast",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclSend",
    "ncclRecv",
];

/// Whether NCCL can be used: the library loads, has every entry point this module calls,
/// and is 2.10 or newer (checked once per process).
///
/// Otherwise [`Error::Unavailable`] with `backend: "nccl"` and a reason starting with
/// `NCCL unavailable:` that names the library names searched and what to install.
pub fn available() -> Result<()> {
    version().map(|_| ())
}

/// The loaded NCCL's `(major, minor, patch)` (`ncclGetVersion`), or [`available`]'s error.
pub fn version() -> Result<(u32, u32, u32)> {
    static LOADED: OnceLock<std::result::Result<(u32, u32, u32), String>> = OnceLock::new();
    LOADED
        .get_or_init(load)
        .clone()
        .map_err(|reason| Error::Unavailable {
            backend: "nccl",
            reason,
        })
}

/// Loads NCCL and checks it (see [`available`]).
fn load() -> std::result::Result<(u32, u32, u32), String> {
    let min = format!("{}.{}", MIN_VERSION.0, MIN_VERSION.1);
    // SAFETY: trying the names only runs the initialisers of a library that loads, and
    // NCCL's set up nothing (devices and threads are touched by its calls, not its loading).
    if !unsafe { sys::is_culib_present() } {
        let mut names = cudarc::get_lib_name_candidates("nccl");
        // cudarc's list repeats some names; keep the first of each, in search order.
        let mut i = 0;
        while i < names.len() {
            if names[..i].contains(&names[i]) {
                names.remove(i);
            } else {
                i += 1;
            }
        }
        let names = names.join(", ");
        return Err(format!(
            "NCCL unavailable: no NCCL library could be loaded (searched the dynamic \
             loader's path, LD_LIBRARY_PATH first, for {names}). Install NCCL {min} or newer: \
             the `libnccl2` package with `libnccl-dev` (`libnccl2` alone ships only \
             `libnccl.so.2`, not among those names; `libnccl-dev` adds the `libnccl.so` link), \
             or the `nvidia-nccl-cu12` wheel with its `nvidia/nccl/lib` directory on \
             LD_LIBRARY_PATH and a `libnccl.so` link to the `libnccl.so.2` there"
        ));
    }
    // SAFETY: `is_culib_present` has just loaded one of the names `culib` tries, in the same
    // order, so `culib` finds a library and does not panic.
    let lib = unsafe { sys::culib() };
    let missing: Vec<&str> = SYMBOLS
        .iter()
        .copied()
        // SAFETY: looking a symbol up only reads the library's tables; the function type is
        // never called through here.
        .filter(|s| unsafe { lib.get::<unsafe extern "C" fn()>(s.as_bytes()) }.is_err())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "NCCL unavailable: the NCCL library found lacks {}; install NCCL {min} or newer",
            missing.join(", ")
        ));
    }
    let mut code: c_int = 0;
    // SAFETY: the library has `ncclGetVersion` (checked above); live out-pointer.
    let r = unsafe { sys::ncclGetVersion(&mut code) };
    if r != sys::ncclResult_t::ncclSuccess {
        return Err(format!(
            "NCCL unavailable: ncclGetVersion failed with {r:?}"
        ));
    }
    let v = split_version(code);
    if (v.0, v.1) < MIN_VERSION {
        return Err(format!(
            "NCCL unavailable: NCCL {}.{}.{} is older than {min} (ncclAvg, bfloat16); \
             install NCCL {min} or newer",
            v.0, v.1, v.2
        ));
    }
    Ok(v)
}

/// `ncclGetVersion`'s code as `(major, minor, patch)`: `major * 10000 + minor * 100 + patch`
/// since 2.9, `major * 1000 + minor * 100 + patch` before.
fn split_version(code: c_int) -> (u32, u32, u32) {
    let code = code.max(0).unsigned_abs();
    if code >= 10000 {
        (code / 10000, code % 10000 / 100, code % 100)
    } else {
        (code / 1000, code % 1000 / 100, code % 100)
    }
}

/// An NCCL result as a [`gpukit_core::Error::Status`] naming `call` (with `api: "nccl"`, the
/// `ncclResult_t`'s value, name and `ncclGetErrorString`'s text).
fn check(call: &'static str, r: sys::ncclResult_t) -> Result<()> {
    if r == sys::ncclResult_t::ncclSuccess {
        return Ok(());
    }
    Err(nccl_error(call, r))
}

#[cold]
fn nccl_error(call: &'static str, r: sys::ncclResult_t) -> Error {
    let text = if available().is_ok() {
        // SAFETY: NCCL is loaded with this symbol (`available`); it returns a static string
        // or null, read before any other call.
        unsafe {
            let p = sys::ncclGetErrorString(r);
            (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
        }
    } else {
        None
    };
    Error::Status {
        api: "nccl",
        call,
        code: i64::from(r as u32),
        name: format!("{r:?}"),
        message: format!(
            "{} (NCCL_DEBUG=WARN makes NCCL print why)",
            text.as_deref().unwrap_or("no description")
        ),
    }
}

/// NCCL's type for `dtype`. Every gpukit type has one (bfloat16 since NCCL 2.10); the match
/// has no default arm, so a new `DType` must be decided on here.
fn nccl_dtype(dtype: DType) -> sys::ncclDataType_t {
    use sys::ncclDataType_t as T;
    match dtype {
        DType::F16 => T::ncclFloat16,
        DType::BF16 => T::ncclBfloat16,
        DType::F32 => T::ncclFloat32,
        DType::F64 => T::ncclFloat64,
        DType::I8 => T::ncclInt8,
        DType::U8 => T::ncclUint8,
        DType::I32 => T::ncclInt32,
        DType::U32 => T::ncclUint32,
        DType::I64 => T::ncclInt64,
        DType::U64 => T::ncclUint64,
    }
}

/// NCCL's reduction for `op` on `dtype`. `Avg` is float-only ([`CollectiveOp::Avg`]):
/// NCCL would truncate an integer average, so it is [`Error::Unsupported`] here as on
/// every backend.
fn nccl_op(op: CollectiveOp, dtype: DType) -> Result<sys::ncclRedOp_t> {
    use sys::ncclRedOp_t as R;
    Ok(match op {
        CollectiveOp::Sum => R::ncclSum,
        CollectiveOp::Avg if !dtype.is_float() => {
            return Err(Error::Unsupported {
                backend: "nccl",
                what: format!("the `avg` reduction on {dtype} (float types only)"),
            })
        }
        CollectiveOp::Avg => R::ncclAvg,
        CollectiveOp::Max => R::ncclMax,
        CollectiveOp::Min => R::ncclMin,
        CollectiveOp::Prod => R::ncclProd,
    })
}

/// A value NCCL takes as a C `int` (a rank, a world size, a device).
fn to_int(op: &'static str, arg: &'static str, v: usize) -> Result<c_int> {
    c_int::try_from(v).map_err(|_| Error::InvalidArgument {
        op,
        arg,
        message: format!("{v} does not fit NCCL's int"),
    })
}

/// `(rank, world_size)` as NCCL's ints, with `rank < world_size`.
fn check_rank(op: &'static str, rank: usize, world_size: usize) -> Result<(c_int, c_int)> {
    if rank >= world_size {
        return Err(Error::InvalidArgument {
            op,
            arg: "rank",
            message: format!("rank {rank} is not below the world size {world_size}"),
        });
    }
    Ok((
        to_int(op, "rank", rank)?,
        to_int(op, "world_size", world_size)?,
    ))
}

/// The device list of [`NcclComm::init_all`]: at least one, each at most once.
fn check_devices(ordinals: &[usize]) -> Result<Vec<c_int>> {
    const OP: &str = "NcclComm::init_all";
    if ordinals.is_empty() {
        return Err(Error::InvalidArgument {
            op: OP,
            arg: "backends",
            message: "no backend given".into(),
        });
    }
    for (i, d) in ordinals.iter().enumerate() {
        if ordinals[..i].contains(d) {
            return Err(Error::InvalidArgument {
                op: OP,
                arg: "backends",
                message: format!("CUDA device {d} appears twice; NCCL needs one rank per device"),
            });
        }
    }
    ordinals
        .iter()
        .map(|&d| to_int(OP, "backends", d))
        .collect()
}

/// The 128-byte `ncclUniqueId` every rank of a communicator starts from: made by one rank
/// ([`NcclId::new`]) and sent to the others by the launcher's bootstrap.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct NcclId([u8; 128]);

impl NcclId {
    /// A new id (`ncclGetUniqueId`, which also opens the root's bootstrap socket), or
    /// [`available`]'s error.
    pub fn new() -> Result<NcclId> {
        available()?;
        let mut id = sys::ncclUniqueId { internal: [0; 128] };
        // SAFETY: NCCL is loaded with this symbol (`available`); live out-pointer to an id.
        check("ncclGetUniqueId", unsafe { sys::ncclGetUniqueId(&mut id) })?;
        Ok(NcclId(id.internal.map(|c| c as u8)))
    }

    /// The id's bytes, to send to the other ranks.
    pub fn as_bytes(&self) -> &[u8; 128] {
        &self.0
    }

    /// The id another rank made, from its bytes.
    pub fn from_bytes(bytes: [u8; 128]) -> NcclId {
        NcclId(bytes)
    }

    fn raw(&self) -> sys::ncclUniqueId {
        sys::ncclUniqueId {
            internal: self.0.map(|b| b as std::ffi::c_char),
        }
    }
}

impl std::fmt::Debug for NcclId {
    /// The first 8 bytes (NCCL's random magic) identify the id; the rest is the root's address.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NcclId(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("..)")
    }
}

/// Starts a group (`ncclGroupStart`): this thread's NCCL calls until the matching
/// [`group_end`] are queued together. Groups nest.
///
/// Two functions rather than a guard, because [`group_end`] is where the grouped calls'
/// errors come back, which a guard's `drop` could only log.
pub fn group_start() -> Result<()> {
    available()?;
    // SAFETY: NCCL is loaded with this symbol (`available`); it only updates this thread's
    // group depth.
    check("ncclGroupStart", unsafe { sys::ncclGroupStart() })
}

/// Ends the group of [`group_start`] (`ncclGroupEnd`), queueing its calls; their errors
/// come back here.
pub fn group_end() -> Result<()> {
    available()?;
    // SAFETY: NCCL is loaded with this symbol (`available`); the grouped calls' pointers
    // and streams are their callers' promises.
    check("ncclGroupEnd", unsafe { sys::ncclGroupEnd() })
}

//! The NCCL layer's tests: without the library, every entry point is `Unavailable` and never
//! a panic; the type and reduction tables; and, on a GPU with NCCL, one rank's collectives.

use super::*;
use crate::{CudaBackend, CudaBuffer};
use gpukit_core::{Backend, BufAt};

fn skip(why: &dyn std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {why}");
}

#[test]
fn without_nccl_every_entry_point_is_unavailable_not_a_panic() {
    let err = match available() {
        // Not a skip: with NCCL, `one_rank_collectives_on_a_gpu` runs it instead.
        Ok(()) => return println!("NCCL is installed here: one_rank_collectives_on_a_gpu runs it"),
        Err(e) => e,
    };
    let Error::Unavailable { backend, reason } = &err else {
        panic!("expected Unavailable, got {err:?}");
    };
    assert_eq!(*backend, "nccl");
    assert!(reason.starts_with("NCCL unavailable:"), "{reason}");
    for needle in [
        "libnccl.so",
        "libnccl2",
        "libnccl-dev",
        "nvidia-nccl-cu12",
        "LD_LIBRARY_PATH",
    ] {
        assert!(reason.contains(needle), "{needle} not in {reason}");
    }
    assert_eq!(NcclId::new().err(), Some(err.clone()));
    assert_eq!(version().err(), Some(err.clone()));
    assert_eq!(group_start().err(), Some(err.clone()));
    assert_eq!(group_end().err(), Some(err.clone()));
    let backend = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => return skip(&format_args!("init_rank/init_all without NCCL: {e}")),
    };
    let id = NcclId::from_bytes([0; 128]);
    assert_eq!(
        NcclComm::init_rank(&backend, &id, 0, 1).err(),
        Some(err.clone())
    );
    assert_eq!(NcclComm::init_all(&[&backend]).err(), Some(err.clone()));
    // The arguments are checked first, NCCL or not.
    assert!(matches!(
        NcclComm::init_rank(&backend, &id, 1, 1),
        Err(Error::InvalidArgument { arg: "rank", .. })
    ));
}

#[test]
fn rank_and_device_arguments_are_checked() {
    let op = "NcclComm::init_rank";
    assert_eq!(check_rank(op, 0, 1).ok(), Some((0, 1)));
    assert_eq!(check_rank(op, 3, 4).ok(), Some((3, 4)));
    for (rank, world) in [(1, 1), (4, 4), (0, 0), (5, 2)] {
        assert!(
            matches!(
                check_rank(op, rank, world),
                Err(Error::InvalidArgument { arg: "rank", .. })
            ),
            "{rank} of {world}"
        );
    }
    assert!(matches!(
        check_rank(op, 0, usize::MAX),
        Err(Error::InvalidArgument {
            arg: "world_size",
            ..
        })
    ));
    assert_eq!(check_devices(&[0, 1, 3]).ok(), Some(vec![0, 1, 3]));
    for bad in [&[][..], &[0, 0], &[1, 2, 1]] {
        assert!(
            matches!(
                check_devices(bad),
                Err(Error::InvalidArgument {
                    arg: "backends",
                    ..
                })
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn every_dtype_maps_to_an_nccl_type_of_its_size() {
    use sys::ncclDataType_t as T;
    let mut seen = Vec::new();
    for d in DType::ALL {
        let t = nccl_dtype(d);
        let size = match t {
            T::ncclInt8 | T::ncclUint8 | T::ncclFloat8e4m3 | T::ncclFloat8e5m2 => 1,
            T::ncclFloat16 | T::ncclBfloat16 => 2,
            T::ncclInt32 | T::ncclUint32 | T::ncclFloat32 => 4,
            T::ncclInt64 | T::ncclUint64 | T::ncclFloat64 => 8,
            T::ncclNumTypes => panic!("{d}: not a type"),
        };
        assert_eq!(size, d.size(), "{d} -> {t:?}");
        assert!(!seen.contains(&t), "{d}: {t:?} twice");
        seen.push(t);
    }
    assert_eq!(nccl_dtype(DType::BF16) as u32, 9, "NCCL's value since 2.10");
    assert_eq!(nccl_dtype(DType::F32), T::ncclFloat32);
    assert_eq!(nccl_dtype(DType::U8), T::ncclUint8);
}

#[test]
fn every_collective_op_maps_to_an_nccl_reduction() {
    use sys::ncclRedOp_t as R;
    let expected = [R::ncclSum, R::ncclAvg, R::ncclMax, R::ncclMin, R::ncclProd];
    for (op, want) in CollectiveOp::ALL.into_iter().zip(expected) {
        assert_eq!(nccl_op(op, DType::F32).ok(), Some(want), "{op}");
    }
    for d in DType::ALL {
        let avg = nccl_op(CollectiveOp::Avg, d);
        if d.is_float() {
            assert_eq!(avg.ok(), Some(R::ncclAvg), "{d}");
        } else {
            assert!(
                matches!(
                    avg,
                    Err(Error::Unsupported {
                        backend: "nccl",
                        ..
                    })
                ),
                "{d}"
            );
            assert_eq!(nccl_op(CollectiveOp::Sum, d).ok(), Some(R::ncclSum), "{d}");
        }
    }
}

#[test]
fn nccl_errors_name_the_call_and_the_code() {
    let e = check("ncclAllReduce", sys::ncclResult_t::ncclInvalidArgument).unwrap_err();
    let Error::Status {
        api,
        call,
        code,
        name,
        message,
    } = &e
    else {
        panic!("{e:?}");
    };
    assert_eq!((*api, *call, *code), ("nccl", "ncclAllReduce", 4));
    assert_eq!(name, "ncclInvalidArgument");
    assert!(message.contains("NCCL_DEBUG"), "{message}");
    assert!(e.to_string().contains("ncclAllReduce"), "{e}");
    assert!(check("ncclAllReduce", sys::ncclResult_t::ncclSuccess).is_ok());
}

#[test]
fn versions_split_both_encodings() {
    assert_eq!(split_version(21003), (2, 10, 3));
    assert_eq!(split_version(22405), (2, 24, 5));
    assert_eq!(split_version(2804), (2, 8, 4));
    assert!((split_version(2804).0, split_version(2804).1) < MIN_VERSION);
    assert!((split_version(21003).0, split_version(21003).1) >= MIN_VERSION);
}

#[test]
fn ids_round_trip_and_debug_stays_short() {
    let mut bytes = [7u8; 128];
    bytes[0] = 0xab;
    let id = NcclId::from_bytes(bytes);
    assert_eq!(id.as_bytes(), &bytes);
    assert_eq!(id.raw().internal.map(|c| c as u8), bytes);
    assert_eq!(format!("{id:?}"), "NcclId(ab07070707070707..)");
}

/// A call missing from `SYMBOLS` would reach cudarc's loader unchecked, which panics on an
/// NCCL without it.
#[test]
fn every_nccl_call_is_listed() {
    let mut calls: Vec<String> = Vec::new();
    let sources = [include_str!("../nccl.rs"), include_str!("comm.rs")];
    for line in sources.iter().flat_map(|text| text.lines()) {
        let code = line.split("//").next().unwrap_or_default();
        for (at, _) in code.match_indices("sys::nccl") {
            let name: String = code[at + 5..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if code[at + 5 + name.len()..].starts_with('(') && !calls.contains(&name) {
                calls.push(name);
            }
        }
    }
    calls.sort();
    let mut listed: Vec<String> = SYMBOLS.iter().map(|s| (*s).to_owned()).collect();
    listed.sort();
    assert_eq!(calls, listed);
}

/// World size 1 on device 0: every collective is a copy, checked against the input.
#[test]
fn one_rank_collectives_on_a_gpu() -> Result<()> {
    let backend = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            skip(&e);
            return Ok(());
        }
    };
    if let Err(e) = available() {
        skip(&e);
        return Ok(());
    }
    let comm = NcclComm::init_rank(&backend, &NcclId::new()?, 0, 1)?;
    assert_eq!((comm.rank(), comm.world_size(), comm.device()), (0, 1, 0));
    let data = [1.0f32, -2.5, 3.0, 1e6];
    let bytes = std::mem::size_of_val(&data);
    let stream = backend.create_stream(0)?;
    let (a, b) = (backend.alloc(bytes, false)?, backend.alloc(bytes, true)?);
    let s = stream.raw.0;
    fn at(buf: &CudaBuffer) -> BufAt<'_, CudaBackend> {
        BufAt { buf, offset: 0 }
    }
    let mut out = [0f32; 4];
    // SAFETY: both buffers hold `bytes` on device 0, `s` is a stream of its primary
    // context, and the stream is synchronised before the buffers or `out` are touched.
    unsafe {
        backend.copy_h2d(&stream, data.as_ptr().cast(), at(&a), bytes)?;
        comm.all_reduce(a.ptr, b.ptr, 4, DType::F32, CollectiveOp::Sum, s)?;
        comm.all_reduce(b.ptr, b.ptr, 4, DType::F32, CollectiveOp::Avg, s)?;
        comm.broadcast(b.ptr, a.ptr, 4, DType::F32, 0, s)?;
        comm.all_gather(a.ptr, b.ptr, 4, DType::F32, s)?;
        comm.reduce_scatter(b.ptr, a.ptr, 4, DType::F32, CollectiveOp::Max, s)?;
        group_start()?;
        comm.send(a.ptr, 4, DType::F32, 0, s)?;
        comm.recv(b.ptr, 4, DType::F32, 0, s)?;
        group_end()?;
        backend.copy_d2h(&stream, at(&b), out.as_mut_ptr().cast(), bytes)?;
    }
    backend.stream_sync(&stream)?;
    assert_eq!(out, data);
    comm.async_error()?;
    // SAFETY: refused before NCCL is called (rank 1 of 1).
    let to_nobody = unsafe { comm.send(a.ptr, 4, DType::F32, 1, s) };
    assert!(matches!(
        to_nobody,
        Err(Error::InvalidArgument { arg: "peer", .. })
    ));
    drop(comm);
    let all = NcclComm::init_all(&[&backend])?;
    assert_eq!(all.len(), 1);
    drop(all);
    // SAFETY: the stream was synchronised after the last use of both buffers.
    unsafe {
        backend.free(a, &[])?;
        backend.free(b, &[])?;
    }
    backend.destroy_stream(stream)
}

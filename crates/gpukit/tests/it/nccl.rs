//! The NCCL paths of `Communicator` and `ProcessGroup`: here (no GPU, no NCCL) the typed
//! "NCCL unavailable" reasons and a job of one process on the CPU; on a GPU machine a world
//! of one rank through NCCL (and, with two GPUs or more, NCCL against the in-process
//! collectives), `SKIPPED` where CUDA or NCCL is missing.

use gpukit::launch::LaunchEnv;
use gpukit::{CollectiveOp, Communicator, Context, DeviceGroup, DeviceSpec, Error, ProcessGroup};
use std::time::Duration;

fn env(vars: &[(&str, &str)]) -> LaunchEnv {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    LaunchEnv::from_vars(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
        .expect("a valid launcher environment")
}

/// NCCL is a typed reason here: the library is missing (or, where it is installed, the
/// streams are not CUDA's), never a panic.
#[test]
fn nccl_on_cpu_streams_is_a_typed_refusal() {
    let group = DeviceGroup::new("cpu:0..2".parse().unwrap()).unwrap();
    match Communicator::nccl(group.default_streams()) {
        Err(Error::Unavailable { backend, reason }) => {
            assert_eq!(backend, "nccl");
            assert!(reason.starts_with("NCCL unavailable"), "{reason}");
        }
        Err(Error::InvalidArgument { op, .. }) => assert_eq!(op, "Communicator::nccl"),
        other => panic!("expected a typed refusal, got {other:?}"),
    }
    // The automatic choice uses the in-process collectives on CPU devices.
    let comm = group.communicator().unwrap();
    assert_eq!(comm.implementation(), "in-process");
    assert!(comm.nccl_rejected().is_none());
}

/// A job of one process runs on the CPU backend without NCCL: the collectives are copies or
/// nothing, and their checks hold.
#[test]
fn a_job_of_one_process_runs_alone_on_the_cpu() {
    let ctx = Context::new(DeviceSpec::Cpu(None)).unwrap();
    let pg = ProcessGroup::join(&ctx, env(&[]), Duration::from_secs(1)).unwrap();
    assert_eq!(
        (pg.rank(), pg.world_size(), pg.implementation()),
        (0, 1, "alone")
    );
    let data = [1.0f32, -2.0, 3.5];
    let mut buf = ctx.alloc_upload(&data).unwrap();
    pg.all_reduce(&mut buf, CollectiveOp::Sum).unwrap();
    pg.broadcast(&mut buf, 0).unwrap();
    assert_eq!(buf.download().unwrap(), data);
    let mut out = ctx.alloc_zeros::<f32>(3).unwrap();
    pg.all_reduce_into(&buf, &mut out, CollectiveOp::Max)
        .unwrap();
    assert_eq!(out.download().unwrap(), data);
    let mut gathered = ctx.alloc_zeros::<f32>(3).unwrap();
    pg.all_gather_into(&buf, &mut gathered).unwrap();
    assert_eq!(gathered.download().unwrap(), data);
    // Misuse: another rank that does not exist, this rank itself, a root out of range,
    // avg of integers, an array of another context, lengths that differ.
    let is_invalid = |r: gpukit::Result<()>, op: &str| match r {
        Err(Error::InvalidArgument { op: got, .. }) => assert_eq!(got, op),
        other => panic!("{op}: expected InvalidArgument, got {other:?}"),
    };
    is_invalid(pg.send(&buf, 0), "ProcessGroup::send");
    is_invalid(pg.recv(&mut buf, 1), "ProcessGroup::recv");
    is_invalid(pg.broadcast(&mut buf, 1), "ProcessGroup::broadcast");
    let mut ints = ctx.alloc_upload(&[1i32, 2]).unwrap();
    is_invalid(
        pg.all_reduce(&mut ints, CollectiveOp::Avg),
        "ProcessGroup::all_reduce",
    );
    let other = Context::new(DeviceSpec::Cpu(Some(1))).unwrap();
    let mut foreign = other.alloc_zeros::<f32>(3).unwrap();
    is_invalid(
        pg.all_reduce(&mut foreign, CollectiveOp::Sum),
        "ProcessGroup::all_reduce",
    );
    let mut short = ctx.alloc_zeros::<f32>(2).unwrap();
    assert!(matches!(
        pg.all_reduce_into(&buf, &mut short, CollectiveOp::Sum),
        Err(Error::LengthMismatch {
            op: "ProcessGroup::all_reduce_into",
            ..
        })
    ));
    assert_eq!(
        buf.download().unwrap(),
        data,
        "a refused call changes nothing"
    );
}

/// A job of several processes needs NCCL, which the CPU backend does not have: a typed
/// reason, before any rendezvous is tried.
#[test]
fn a_job_of_two_processes_on_the_cpu_is_unavailable() {
    let ctx = Context::new(DeviceSpec::Cpu(None)).unwrap();
    let env = env(&[
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29500"),
    ]);
    match ProcessGroup::join(&ctx, env, Duration::from_millis(200)) {
        Err(Error::Unavailable { backend, reason }) => {
            assert_eq!(backend, "nccl");
            assert!(reason.starts_with("NCCL unavailable"), "{reason}");
            assert!(reason.contains("DeviceGroup"), "{reason}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// On one GPU: a world of one rank through NCCL, `Communicator` and `ProcessGroup`; with two
/// GPUs or more, NCCL's all-reduce against the in-process one. `SKIPPED` without CUDA or
/// NCCL.
#[cfg(feature = "cuda")]
#[test]
fn nccl_world_of_one_on_a_gpu() {
    let Some(ctx) = crate::common::cuda() else {
        return;
    };
    if let Err(e) = gpukit::cuda::nccl::available() {
        // Without NCCL on a GPU: the automatic choice falls back and says why.
        let comm = Communicator::new(vec![ctx.default_stream().clone()]).unwrap();
        assert_eq!(comm.implementation(), "in-process");
        assert!(
            matches!(
                comm.nccl_rejected(),
                Some(Error::Unavailable {
                    backend: "nccl",
                    ..
                })
            ),
            "{:?}",
            comm.nccl_rejected()
        );
        let pg = ProcessGroup::join(&ctx, env(&[]), Duration::from_secs(1)).unwrap();
        assert_eq!(pg.implementation(), "alone");
        crate::common::skipped(&e.to_string());
        return;
    }
    let comm = Communicator::nccl(vec![ctx.default_stream().clone()]).unwrap();
    assert_eq!(comm.implementation(), "nccl");
    let data: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5 - 7.0).collect();
    let mut bufs = [ctx.alloc_upload(&data).unwrap()];
    comm.all_reduce(&mut bufs, CollectiveOp::Sum).unwrap();
    comm.all_reduce(&mut bufs, CollectiveOp::Avg).unwrap();
    comm.broadcast(0, &mut bufs).unwrap();
    assert_eq!(bufs[0].download().unwrap(), data);
    let mut out = [ctx.alloc_zeros::<f32>(data.len()).unwrap()];
    comm.all_gather_into(&bufs, &mut out).unwrap();
    assert_eq!(out[0].download().unwrap(), data);
    comm.reduce_scatter_into(&bufs, &mut out, CollectiveOp::Max)
        .unwrap();
    assert_eq!(out[0].download().unwrap(), data);
    let pg = ProcessGroup::join(&ctx, env(&[]), Duration::from_secs(30)).unwrap();
    assert_eq!(pg.implementation(), "nccl");
    pg.all_reduce(&mut bufs[0], CollectiveOp::Sum).unwrap();
    assert_eq!(bufs[0].download().unwrap(), data);

    let Ok(group) = DeviceGroup::new("cuda:*".parse().unwrap()) else {
        return;
    };
    if group.len() < 2 {
        // Not a skip: the one-rank world above ran; NCCL across devices needs two.
        println!("note: NCCL across devices not run: one CUDA device");
        return;
    }
    let nccl = group.communicator().unwrap();
    let local = Communicator::in_process(group.default_streams()).unwrap();
    assert_eq!(nccl.implementation(), "nccl");
    let mut a: Vec<_> = group
        .iter()
        .enumerate()
        .map(|(r, c)| c.alloc_upload(&vec![r as f32 + 1.0; 4099]).unwrap())
        .collect();
    let mut b: Vec<_> = group
        .iter()
        .enumerate()
        .map(|(r, c)| c.alloc_upload(&vec![r as f32 + 1.0; 4099]).unwrap())
        .collect();
    nccl.all_reduce(&mut a, CollectiveOp::Sum).unwrap();
    local.all_reduce(&mut b, CollectiveOp::Sum).unwrap();
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.download().unwrap(), y.download().unwrap());
    }
}

//! `DeviceGroup`: opening a set of devices, its contexts and streams, `auto`, and
//! `GPU_DEVICE` (in a child process: the tests of this binary share its environment).

use super::*;

use crate::common;
use gpukit::{DeviceGroup, DeviceSet};

#[test]
fn a_cpu_range_opens_one_context_per_device() -> Result<()> {
    let set: DeviceSet = "cpu:0..3".parse()?;
    let group = DeviceGroup::new(set.clone())?;
    assert_eq!(group.set(), &set);
    assert_eq!(group.len(), 3);
    assert!(!group.is_empty());
    let ids: Vec<usize> = group.iter().map(|c| c.device_id()).collect();
    assert_eq!(ids, [0, 1, 2]);
    for (r, ctx) in group.contexts().iter().enumerate() {
        assert_eq!(ctx.backend_name(), "cpu");
        assert_eq!(group[r].id(), ctx.id());
    }
    let mut ctx_ids: Vec<u64> = (&group).into_iter().map(|c| c.id()).collect();
    ctx_ids.sort_unstable();
    ctx_ids.dedup();
    assert_eq!(ctx_ids.len(), 3, "distinct contexts");

    let streams = group.default_streams();
    let stream_ctxs: Vec<u64> = streams.iter().map(|s| s.context_id()).collect();
    let want: Vec<u64> = group.iter().map(|c| c.id()).collect();
    assert_eq!(stream_ctxs, want);
    let comm = group.communicator()?;
    assert_eq!(comm.world_size(), 3);
    assert_eq!(comm.implementation(), "in-process");
    let comm_ctxs: Vec<u64> = comm.streams().iter().map(|s| s.context_id()).collect();
    assert_eq!(comm_ctxs, want);

    // The group works: each device holds its rank + 1, the sum goes everywhere.
    let mut xs = group
        .iter()
        .enumerate()
        .map(|(r, c)| c.alloc_upload(&[r as i32 + 1; 5]))
        .collect::<Result<Vec<_>>>()?;
    comm.all_reduce(&mut xs, CollectiveOp::Sum)?;
    group.sync()?;
    for x in &xs {
        assert_eq!(x.download()?, [6; 5]);
    }

    // Other spellings of sets of CPU devices.
    let group = DeviceGroup::new("cpu:1,3".parse()?)?;
    let ids: Vec<usize> = group.iter().map(|c| c.device_id()).collect();
    assert_eq!(ids, [1, 3]);
    let group = DeviceGroup::new(DeviceSpec::Cpu(Some(2)).into())?;
    assert_eq!((group.len(), group[0].device_id()), (1, 2));
    // An empty list names no device.
    let r = DeviceGroup::new(DeviceSet::List(Vec::new()));
    assert!(
        matches!(r, Err(gpukit::Error::InvalidDeviceSpec { .. })),
        "{r:?}"
    );
    Ok(())
}

/// The GPUs `auto` takes on this machine: the CUDA devices, else the Vulkan adapters that
/// are not CPU implementations, as `(backend, count)`; `None` without either.
fn gpus_for_auto() -> Option<(&'static str, usize)> {
    let cuda = common::probed_devices().len();
    if cuda > 0 {
        return Some(("cuda", cuda));
    }
    #[cfg(feature = "vulkan")]
    if let Ok(p) = gpukit::wgpu::probe() {
        let gpus = p
            .adapters
            .iter()
            .filter(|a| a.usable() && a.kind != gpukit::wgpu::AdapterKind::Cpu)
            .count();
        if gpus > 0 {
            return Some(("vulkan", gpus));
        }
    }
    None
}

#[test]
fn auto_without_a_gpu_is_two_cpu_devices() -> Result<()> {
    let group = DeviceGroup::new(DeviceSet::Auto)?;
    assert_eq!(group.set(), &DeviceSet::Auto);
    let backends: Vec<&str> = group.iter().map(|c| c.backend_name()).collect();
    match gpus_for_auto() {
        // A lavapipe adapter, if any, is a CPU implementation: passed over.
        None => {
            assert_eq!(backends, ["cpu", "cpu"]);
            let ids: Vec<usize> = group.iter().map(|c| c.device_id()).collect();
            assert_eq!(ids, [0, 1]);
        }
        Some((backend, n)) => assert_eq!(backends, vec![backend; n]),
    }
    Ok(())
}

/// Set in the child process of `gpu_device_names_the_default_group`.
const CHILD: &str = "GPUKIT_TEST_MULTI_DEVICE_CHILD";

#[test]
fn gpu_device_names_the_default_group() {
    if std::env::var_os(CHILD).is_some() {
        return default_group_from_this_process_environment();
    }
    common::run_in_child(
        module_path!(),
        "gpu_device_names_the_default_group",
        CHILD,
        |cmd| cmd,
    );
}

/// The body of `gpu_device_names_the_default_group`: sets `GPU_DEVICE` in turn, so only a
/// process with no other thread reading the environment may run it (the child).
fn default_group_from_this_process_environment() {
    let ids = |g: &DeviceGroup| g.iter().map(|c| c.device_id()).collect::<Vec<_>>();

    std::env::set_var(gpukit::DEVICE_VAR, "cpu:1..=3");
    let group = DeviceGroup::default().expect("GPU_DEVICE=cpu:1..=3");
    assert_eq!(ids(&group), [1, 2, 3]);
    assert!(group.iter().all(|c| c.backend_name() == "cpu"));

    // One device is a group of one.
    std::env::set_var(gpukit::DEVICE_VAR, "cpu:2");
    let group = DeviceGroup::default().expect("GPU_DEVICE=cpu:2");
    assert_eq!(ids(&group), [2]);

    // A bad set names the variable.
    std::env::set_var(gpukit::DEVICE_VAR, "cpu:0,0");
    match DeviceGroup::default() {
        Err(gpukit::Error::InvalidDeviceSpec { origin, reason, .. }) => {
            assert_eq!(origin, gpukit::DEVICE_VAR);
            assert!(reason.contains("twice"), "{reason}");
        }
        other => panic!("GPU_DEVICE=cpu:0,0 gave {other:?}"),
    }

    // Without the variable: `auto`.
    std::env::remove_var(gpukit::DEVICE_VAR);
    let group = DeviceGroup::default().expect("auto");
    assert_eq!(group.set(), &DeviceSet::Auto);
}

/// Regression: `DeviceGroup::new(DeviceSet::All(SpecBackend::Cpu))` opened a group of no
/// device (`resolve` counts 0 visible CPU devices and does not refuse it), which
/// `DeviceGroup::is_empty` says never happens and whose `communicator()` then fails.
#[test]
fn a_set_of_every_cpu_device_built_in_code_is_refused() {
    // `cpu:*` does not parse (the CPU backend has as many devices as a set names): built
    // as a value, it must not open a group of no device either.
    let r = DeviceGroup::new(DeviceSet::All(gpukit::core::SpecBackend::Cpu));
    assert!(
        matches!(&r, Err(gpukit::Error::InvalidDeviceSpec { .. })),
        "cpu:* gave {r:?}"
    );
}

/// `cpu:0,0` does not parse ("none twice", `DeviceSet::List`'s documentation says): built
/// as a value, it must not open two contexts of one device as two ranks.
#[test]
fn a_list_naming_a_device_twice_built_in_code_is_refused() {
    let r = DeviceGroup::new(DeviceSet::List(vec![DeviceSpec::Cpu(Some(0)); 2]));
    assert!(
        matches!(&r, Err(gpukit::Error::InvalidDeviceSpec { reason, .. }) if reason.contains("twice")),
        "cpu:0,0 gave {r:?}"
    );
}

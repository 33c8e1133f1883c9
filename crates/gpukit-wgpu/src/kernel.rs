//! Custom kernels from WGSL.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gpukit_core::{Error, KernelArg, KernelDesc, LaunchConfig, Result};

use crate::device::NAME;
use crate::ops::{compile, copy_raw, dispatch, Bind, Pipe};
use crate::stream::StreamInner;
use crate::{round4, Shared, WgpuBackend};

/// What a pipeline of a custom kernel depends on: which bindings are read-only, the bytes
/// of immediates, and the block size along the dimensions the WGSL leaves to the launch.
type LayoutKey = (Vec<bool>, u32, [u32; 3]);

/// A loaded WGSL kernel: its source, entry point and workgroup size, and a pipeline per
/// argument layout it has been launched with.
pub struct WgpuKernel {
    name: String,
    src: String,
    workgroup: [u32; 3],
    /// Which of `block_x`, `block_y`, `block_z` the WGSL declares as `override`s: those
    /// take the launch's block size.
    overrides: [bool; 3],
    pipes: Mutex<HashMap<LayoutKey, Arc<Pipe>>>,
}

impl std::fmt::Debug for WgpuKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuKernel")
            .field("name", &self.name)
            .field("workgroup", &self.workgroup)
            .finish_non_exhaustive()
    }
}

/// Parses the kernel's WGSL and finds its entry point (compiling happens at the first
/// launch, when the argument layout is known).
pub(crate) fn load(shared: &Shared, desc: &KernelDesc) -> Result<WgpuKernel> {
    shared.check()?;
    // A `#[kernel]` with subgroup operations brings WGSL without them for adapters that
    // lack them.
    let src = match &desc.wgsl_without_subgroups {
        Some(plain) if !shared.features.contains(wgpu::Features::SUBGROUP) => Some(plain),
        _ => desc.wgsl.as_ref(),
    };
    let Some(src) = src else {
        return Err(Error::KernelUnavailable {
            kernel: desc.name.clone(),
            backend: NAME,
            hint: desc
                .checked
                .as_ref()
                .and_then(|c| c.no_wgsl)
                .unwrap_or("add WGSL with `KernelSpec::wgsl`"),
        });
    };
    let module = wgpu::naga::front::wgsl::parse_str(src).map_err(|e| Error::KernelCompile {
        kernel: desc.name.clone(),
        log: e.emit_to_string(src),
    })?;
    if let Some(hint) = missing_feature(shared, &module) {
        return Err(Error::KernelUnavailable {
            kernel: desc.name.clone(),
            backend: NAME,
            hint,
        });
    }
    let entry = module
        .entry_points
        .iter()
        .find(|e| e.name == desc.name && e.stage == wgpu::naga::ShaderStage::Compute)
        .ok_or_else(|| Error::KernelCompile {
            kernel: desc.name.clone(),
            log: format!(
                "no `@compute fn {}` in the WGSL (entry points: {})",
                desc.name,
                module
                    .entry_points
                    .iter()
                    .map(|e| e.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })?;
    let declared = |n: &str| {
        module
            .overrides
            .iter()
            .any(|(_, o)| o.name.as_deref() == Some(n))
    };
    let overrides = [
        declared("block_x"),
        declared("block_y"),
        declared("block_z"),
    ];
    Ok(WgpuKernel {
        name: desc.name.clone(),
        src: src.clone(),
        workgroup: entry.workgroup_size,
        overrides,
        pipes: Mutex::new(HashMap::new()),
    })
}

/// Why the adapter cannot run `module`, if it cannot: a 64-bit or 16-bit type or subgroup
/// operations it lacks the feature for.
fn missing_feature(shared: &Shared, module: &wgpu::naga::Module) -> Option<&'static str> {
    use wgpu::naga::{Expression, ScalarKind, TypeInner};
    let has = |f| shared.features.contains(f);
    let subgroups = module
        .functions
        .iter()
        .map(|(_, f)| f)
        .chain(module.entry_points.iter().map(|e| &e.function))
        .any(|f| {
            f.expressions.iter().any(|(_, e)| {
                matches!(
                    e,
                    Expression::SubgroupOperationResult { .. } | Expression::SubgroupBallotResult
                )
            }) || f.arguments.iter().any(|a| {
                matches!(
                    a.binding,
                    Some(wgpu::naga::Binding::BuiltIn(
                        wgpu::naga::BuiltIn::SubgroupSize
                            | wgpu::naga::BuiltIn::SubgroupInvocationId
                            | wgpu::naga::BuiltIn::SubgroupId
                            | wgpu::naga::BuiltIn::NumSubgroups
                    ))
                )
            })
        });
    if subgroups && !has(wgpu::Features::SUBGROUP) {
        return Some(
            "the kernel uses subgroup operations, which this adapter lacks (wgpu's SUBGROUP): \
             run it on the CPU or CUDA backends",
        );
    }
    for (_, ty) in module.types.iter() {
        let scalar = match ty.inner {
            TypeInner::Scalar(s) | TypeInner::Atomic(s) => s,
            TypeInner::Vector { scalar, .. } | TypeInner::Matrix { scalar, .. } => scalar,
            _ => continue,
        };
        match (scalar.kind, scalar.width) {
            (ScalarKind::Float, 8) if !has(wgpu::Features::SHADER_F64) => {
                return Some(
                    "the kernel uses f64, which this adapter lacks (wgpu's SHADER_F64): run it \
                     on the CPU or CUDA backends",
                )
            }
            (ScalarKind::Float, 2) if !has(wgpu::Features::SHADER_F16) => {
                return Some(
                    "the kernel uses f16, which this adapter lacks (wgpu's SHADER_F16): run it \
                     on the CPU or CUDA backends",
                )
            }
            (ScalarKind::Sint | ScalarKind::Uint, 8) if !has(wgpu::Features::SHADER_INT64) => {
                return Some(
                    "the kernel uses i64 or u64, which this adapter lacks (wgpu's \
                     SHADER_INT64): run it on the CPU or CUDA backends",
                )
            }
            _ => {}
        }
    }
    None
}

/// Launches a kernel: binds the array arguments in order, packs the scalars into the
/// immediates, dispatches `cfg.grid` workgroups.
pub(crate) fn launch(
    shared: &Shared,
    stream: &StreamInner,
    k: &WgpuKernel,
    cfg: &LaunchConfig,
    args: &[KernelArg<'_, WgpuBackend>],
) -> Result<()> {
    shared.check()?;
    let fixed = (0..3).all(|i| k.overrides[i] || cfg.block[i] == k.workgroup[i]);
    if !fixed {
        return Err(Error::InvalidLaunch {
            kernel: k.name.clone(),
            reason: format!(
                "block {:?} differs from the WGSL entry point's @workgroup_size {:?} (WGSL \
                 fixes the workgroup size in the shader unless it is `override block_x` etc.)",
                cfg.block, k.workgroup
            ),
        });
    }
    let mut binds: Vec<BindSrc<'_>> = Vec::with_capacity(args.len());
    let mut read_only: Vec<bool> = Vec::with_capacity(args.len());
    let mut imm: Vec<u8> = Vec::new();
    for a in args {
        match a {
            KernelArg::Buffer {
                at: Some(at),
                bytes,
                write,
            } => {
                let (off, n) = (at.offset as u64, *bytes as u64);
                let size = round4(n);
                if size > shared.max_binding {
                    return Err(Error::Unsupported {
                        backend: NAME,
                        what: format!(
                            "an argument of {bytes} bytes for WGSL kernel `{}` (one binding \
                             holds at most {} bytes)",
                            k.name, shared.max_binding
                        ),
                    });
                }
                if off % shared.align == 0 {
                    binds.push(BindSrc::Direct(Bind {
                        buf: &at.buf.buf,
                        base: off,
                        size: size.min(at.buf.buf.size() - off),
                    }));
                } else {
                    // Bindings start at aligned offsets: the view goes through an aligned
                    // temporary, copied in before and (if written) back after the launch.
                    let tmp = shared.scoped("Device::create_buffer", || {
                        shared.device.create_buffer(&wgpu::BufferDescriptor {
                            label: Some("gpukit unaligned kernel argument"),
                            size,
                            usage: wgpu::BufferUsages::STORAGE
                                | wgpu::BufferUsages::COPY_SRC
                                | wgpu::BufferUsages::COPY_DST,
                            mapped_at_creation: false,
                        })
                    })?;
                    copy_raw(shared, stream, (&at.buf.buf, off), (&tmp, 0), n)?;
                    binds.push(BindSrc::Temp {
                        tmp,
                        size,
                        back: write.then_some((&at.buf.buf, off, n)),
                    });
                }
                read_only.push(!write);
            }
            KernelArg::Buffer {
                at: None, write, ..
            } => {
                binds.push(BindSrc::Direct(Bind {
                    buf: if *write {
                        &shared.dummy
                    } else {
                        &shared.dummy_ro
                    },
                    base: 0,
                    size: crate::DUMMY_BYTES,
                }));
                read_only.push(!write);
            }
            KernelArg::Scalar { bytes, len } => {
                let slot = if *len > 4 { 8 } else { 4 };
                while !imm.len().is_multiple_of(slot) {
                    imm.push(0);
                }
                let mut v = [0u8; 8];
                v[..*len].copy_from_slice(&bytes[..*len]);
                imm.extend_from_slice(&v[..slot]);
            }
        }
    }
    // wgpu refuses one buffer bound read-only and writable in one dispatch (two views of
    // one array, one of them an `Out`).
    let direct: Vec<Option<&wgpu::Buffer>> = binds
        .iter()
        .map(|b| match b {
            BindSrc::Direct(b) => Some(b.buf),
            BindSrc::Temp { back, .. } => back.map(|(buf, _, _)| buf),
        })
        .collect();
    for (i, a) in direct.iter().enumerate() {
        for (j, b) in direct.iter().enumerate().skip(i + 1) {
            let same = matches!((a, b), (Some(a), Some(b)) if a == b && *a != &shared.dummy && *a != &shared.dummy_ro);
            if same && read_only[i] != read_only[j] {
                return Err(Error::Unsupported {
                    backend: NAME,
                    what: format!(
                        "arguments {i} and {j} of WGSL kernel `{}` are views of one array, one \
                         read and one written: wgpu binds a buffer either read-only or writable \
                         in one dispatch (copy one of them first)",
                        k.name
                    ),
                });
            }
        }
    }
    // WGSL rounds a struct's size up to its alignment (up to 16 bytes).
    let imm_size = (imm.len() as u64).div_ceil(16) as u32 * 16;
    imm.resize(imm_size as usize, 0);
    if imm_size > shared.limits.max_immediate_size {
        return Err(Error::Unsupported {
            backend: NAME,
            what: format!(
                "{imm_size} bytes of scalar arguments for WGSL kernel `{}` (the adapter's \
                 immediates hold {})",
                k.name, shared.limits.max_immediate_size
            ),
        });
    }
    let block = [0, 1, 2].map(|i| if k.overrides[i] { cfg.block[i] } else { 0 });
    let key = (read_only, imm_size, block);
    let existing = k
        .pipes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    let pipe = match existing {
        Some(p) => p,
        None => {
            let constants: Vec<(&str, f64)> = ["block_x", "block_y", "block_z"]
                .into_iter()
                .zip(block)
                .zip(k.overrides)
                .filter(|(_, o)| *o)
                .map(|((n, b), _)| (n, f64::from(b)))
                .collect();
            let p = Arc::new(compile(
                shared, &k.name, &k.name, &k.src, &key.0, imm_size, &constants,
            )?);
            k.pipes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key, p.clone());
            p
        }
    };
    let words: Vec<u32> = imm
        .chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(w)
        })
        .collect();
    let bound: Vec<Bind<'_>> = binds
        .iter()
        .map(|b| match b {
            BindSrc::Direct(b) => *b,
            BindSrc::Temp { tmp, size, .. } => Bind {
                buf: tmp,
                base: 0,
                size: *size,
            },
        })
        .collect();
    dispatch(shared, stream, &pipe, &bound, &words, cfg.grid)?;
    for b in &binds {
        if let BindSrc::Temp {
            tmp,
            back: Some((buf, off, n)),
            ..
        } = b
        {
            copy_raw(shared, stream, (tmp, 0), (buf, *off), *n)?;
        }
    }
    Ok(())
}

/// Where an argument's binding comes from.
enum BindSrc<'a> {
    /// The array itself, at an aligned offset.
    Direct(Bind<'a>),
    /// An aligned temporary holding a copy of the view, copied back to it after the launch
    /// when the kernel writes it.
    Temp {
        tmp: wgpu::Buffer,
        size: u64,
        back: Option<(&'a wgpu::Buffer, u64, u64)>,
    },
}

//! Compiled pipelines and their dispatch: every WGSL kernel (built-in or custom) compiled
//! into a pipeline with storage bindings and immediates, the built-in ones once per device
//! ([`pipe`]), and one dispatch recorded on a stream over bound ranges ([`Bind`]).

use std::sync::Arc;

use gpukit_core::{Error, Result};

use crate::stream::StreamInner;
use crate::wgsl::IMMEDIATE_BYTES;
use crate::Shared;

/// A compiled kernel: its pipeline and bind group layout.
pub(crate) struct Pipe {
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
}

/// The layout of storage buffers at bindings `0..`, read-only where `read_only` says.
fn storage_layout(shared: &Shared, read_only: &[bool]) -> wgpu::BindGroupLayout {
    let entries: Vec<wgpu::BindGroupLayoutEntry> = (0u32..)
        .zip(read_only)
        .map(|(i, &read_only)| wgpu::BindGroupLayoutEntry {
            binding: i,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        })
        .collect();
    shared
        .device
        .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("gpukit"),
            entries: &entries,
        })
}

/// Compiles `src` into a pipeline with storage buffers (read-only where `read_only` says)
/// and `immediates` bytes of immediates; an error is [`Error::KernelCompile`] naming `name`.
pub(crate) fn compile(
    shared: &Shared,
    name: &str,
    entry: &str,
    src: &str,
    read_only: &[bool],
    immediates: u32,
    constants: &[(&str, f64)],
) -> Result<Pipe> {
    let made = shared.scoped("compile", || {
        let module = shared
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(name),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            });
        let layout = storage_layout(shared, read_only);
        let pl = shared
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(name),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: immediates,
            });
        let pipeline = shared
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(name),
                layout: Some(&pl),
                module: &module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants,
                    ..Default::default()
                },
                cache: None,
            });
        Pipe { pipeline, layout }
    });
    made.map_err(|e| Error::KernelCompile {
        kernel: name.to_string(),
        log: match e {
            Error::Backend { message, .. } => message,
            other => other.to_string(),
        },
    })
}

/// The built-in pipeline `key`, compiled on first use from `src()`.
pub(super) fn pipe(
    shared: &Shared,
    key: String,
    bindings: u32,
    src: impl FnOnce() -> String,
) -> Result<Arc<Pipe>> {
    if let Some(p) = shared
        .pipelines
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
    {
        return Ok(p.clone());
    }
    // Every built-in binding is read-write: two operands in one buffer (views of one
    // array) then never conflict, which a read-only and a writable binding would.
    let rw = vec![false; bindings as usize];
    let p = Arc::new(compile(
        shared,
        &key,
        "main",
        &src(),
        &rw,
        IMMEDIATE_BYTES,
        &[],
    )?);
    shared
        .pipelines
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, p.clone());
    Ok(p)
}

/// A bound range: a buffer from `base`, `size` bytes.
#[derive(Clone, Copy)]
pub(crate) struct Bind<'a> {
    pub(crate) buf: &'a wgpu::Buffer,
    pub(crate) base: u64,
    pub(crate) size: u64,
}

/// Records one dispatch of `pipe` on `stream`.
pub(crate) fn dispatch(
    shared: &Shared,
    stream: &StreamInner,
    pipe: &Pipe,
    binds: &[Bind<'_>],
    imm: &[u32],
    groups: [u32; 3],
) -> Result<()> {
    let entries: Vec<wgpu::BindGroupEntry> = binds
        .iter()
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: b.buf,
                offset: b.base,
                size: wgpu::BufferSize::new(b.size),
            }),
        })
        .collect();
    let bg = shared.scoped("Device::create_bind_group", || {
        shared.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("gpukit"),
            layout: &pipe.layout,
            entries: &entries,
        })
    })?;
    let mut bytes = Vec::with_capacity(imm.len() * 4);
    for v in imm {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    stream.record(|enc| {
        let mut cp = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("gpukit op"),
            timestamp_writes: None,
        });
        cp.set_pipeline(&pipe.pipeline);
        cp.set_bind_group(0, &bg, &[]);
        if !bytes.is_empty() {
            cp.set_immediates(0, &bytes);
        }
        cp.dispatch_workgroups(groups[0], groups[1], groups[2]);
    })
}

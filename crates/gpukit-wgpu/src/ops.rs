//! Built-in ops, copies and uploads: compiled pipelines, bound windows and dispatches.

use std::sync::Arc;

use gpukit_core::{BufAt, DType, Error, Op, Result, Rhs, Scalar};

use crate::device::NAME;
use crate::stream::StreamInner;
use crate::wgsl::{self, pf, set_scalar, Caps, ReduceKind, Wt, IMMEDIATE_BYTES};
use crate::{round4, Shared, WgpuBackend, WgpuBuffer};

/// Threads per workgroup of the element-wise kernels.
const WG: u64 = 256;

/// A compiled kernel: its pipeline and bind group layout.
pub(crate) struct Pipe {
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
}

/// The layout of storage buffers at bindings `0..`, read-only where `read_only` says.
pub(crate) fn storage_layout(shared: &Shared, read_only: &[bool]) -> wgpu::BindGroupLayout {
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
fn pipe(
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

impl<'a> Bind<'a> {
    fn dummy(shared: &'a Shared) -> Bind<'a> {
        Bind {
            buf: &shared.dummy,
            base: 0,
            size: crate::DUMMY_BYTES,
        }
    }
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

fn unsupported(what: String) -> Error {
    Error::Unsupported {
        backend: NAME,
        what,
    }
}

fn u32_of(v: u64, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| unsupported(format!("{what} of {v} (more than 2^32 - 1)")))
}

/// One operand of an element-wise op: a buffer, the byte offset of element 0, the element
/// size.
#[derive(Clone, Copy)]
struct Operand<'a> {
    buf: &'a WgpuBuffer,
    off: u64,
    es: u64,
}

impl<'a> Operand<'a> {
    fn of(at: BufAt<'a, WgpuBackend>, es: u64) -> Operand<'a> {
        Operand {
            buf: at.buf,
            off: at.offset as u64,
            es,
        }
    }

    /// The window over elements `start..start + len`, and the element offset of `start`
    /// inside it.
    fn window(&self, shared: &Shared, start: u64, len: u64) -> (Bind<'a>, u32) {
        let first = self.off + start * self.es;
        let base = first / shared.align * shared.align;
        let end = round4(first + len * self.es).min(self.buf.buf.size());
        (
            Bind {
                buf: &self.buf.buf,
                base,
                size: (end - base).max(4),
            },
            ((first - base) / self.es) as u32,
        )
    }

    /// The whole range of `len` elements as one window, or `Unsupported`.
    fn whole(&self, shared: &Shared, len: u64, what: &str) -> Result<(Bind<'a>, u32)> {
        let (b, o) = self.window(shared, 0, len);
        if b.size > shared.max_binding {
            return Err(unsupported(format!(
                "{what} of {} bytes in one binding (the adapter binds at most {} bytes)",
                len * self.es,
                shared.max_binding
            )));
        }
        Ok((b, o))
    }
}

/// Workgroups for a grid-stride loop over `n` items.
fn groups_for(shared: &Shared, n: u64) -> u32 {
    let max = u64::from(shared.limits.max_compute_workgroups_per_dimension);
    n.div_ceil(WG).clamp(1, max) as u32
}

/// Runs an element-wise kernel over `len` elements in chunks that keep every window
/// within one binding. `ops[0..3]` are bound as `in0`, `in1`, `out0` (`None`: nothing);
/// `vector` replaces `in1` by a whole vector; `fill` sets the immediates (`n`, `base` and
/// offsets are set here).
#[allow(clippy::too_many_arguments)]
fn elementwise(
    shared: &Shared,
    stream: &StreamInner,
    pipe: &Pipe,
    ops: [Option<Operand<'_>>; 3],
    vector: Option<(Operand<'_>, u64)>,
    len: u64,
    mut imm: [u32; pf::WORDS],
) -> Result<()> {
    let max_es = ops.iter().flatten().map(|o| o.es).max().unwrap_or(4);
    let chunk = ((shared.max_binding - shared.align - 8) / max_es).max(1);
    let vec_bind = match vector {
        Some((v, n)) => Some(v.whole(shared, n, "a broadcast vector")?),
        None => None,
    };
    let mut start = 0u64;
    while start < len {
        let n = chunk.min(len - start);
        let mut binds = [Bind::dummy(shared); 3];
        for (slot, (o, field)) in ops.iter().zip([pf::O0, pf::O1, pf::O2]).enumerate() {
            if let Some(o) = o {
                let (b, off) = o.window(shared, start, n);
                binds[slot] = b;
                imm[field] = off;
            }
        }
        if let Some((b, off)) = vec_bind {
            binds[1] = b;
            imm[pf::O1] = off;
        }
        imm[pf::N] = u32_of(n, "a chunk")?;
        imm[pf::BASE] = u32_of(start, "an element index")?;
        dispatch(
            shared,
            stream,
            pipe,
            &binds,
            &imm,
            [groups_for(shared, n), 1, 1],
        )?;
        start += n;
    }
    Ok(())
}

/// A scalar as the bits of the compute type of `t` (f16 widened to f32).
fn scalar_bits(s: Scalar, t: Wt) -> u64 {
    let bytes = s.bytes();
    let mut b = [0u8; 8];
    b[..bytes.len()].copy_from_slice(bytes);
    let raw = u64::from_le_bytes(b);
    match t {
        Wt::F16 => f16_to_f32_bits(raw as u16),
        Wt::BF16 => (raw & 0xffff) << 16,
        Wt::I8 => u64::from(raw as u8 as i8 as i32 as u32),
        _ => raw,
    }
}

/// The f32 bits of the f16 with bits `h` (exact: every f16 is an f32).
fn f16_to_f32_bits(h: u16) -> u64 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: normalise.
            let shift = m.leading_zeros() - 21;
            let m = (m << shift) & 0x3ff;
            sign | ((127 - 15 - shift + 1) << 23) | (m << 13)
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    u64::from(bits)
}

/// The device's shader capabilities.
pub(crate) fn caps(shared: &Shared) -> Caps {
    let f = shared.features;
    Caps {
        f16: f.contains(wgpu::Features::SHADER_F16),
        f64: f.contains(wgpu::Features::SHADER_F64),
        int64: f.contains(wgpu::Features::SHADER_INT64),
    }
}

/// The WGSL type of `dtype` on this device, or `Unsupported`.
fn wt(shared: &Shared, dtype: DType, op: &str) -> Result<Wt> {
    Wt::of(dtype, caps(shared)).map_err(|why| unsupported(format!("`{op}` on {why}")))
}

/// Whether the op calls `exp`, `log`, `tanh` or `pow`, which WGSL lacks in 64 bits.
fn needs_math(op: &Op<'_, WgpuBackend>) -> bool {
    use gpukit_core::{BinaryOp, UnaryOp};
    match op {
        Op::Unary { op, .. } => !matches!(
            op,
            UnaryOp::Neg
                | UnaryOp::Abs
                | UnaryOp::Square
                | UnaryOp::Relu
                | UnaryOp::Sqrt
                | UnaryOp::Rsqrt
        ),
        Op::Binary { op, .. } => *op == BinaryOp::Pow,
        Op::Softmax { .. } | Op::CrossEntropy { .. } => true,
        _ => false,
    }
}

/// Runs one op of the table.
pub(crate) fn op(
    shared: &Shared,
    stream: &StreamInner,
    dtype: DType,
    op: &Op<'_, WgpuBackend>,
) -> Result<()> {
    shared.check()?;
    let name = op.name();
    let t = wt(shared, dtype, name)?;
    if op.floats_only() && !t.is_float() {
        return Err(unsupported(format!(
            "`{name}` on {dtype} (a float-only op)"
        )));
    }
    if needs_math(op) && !t.has_math() {
        return Err(unsupported(format!(
            "`{name}` on {dtype} (WGSL on Vulkan has exp, log, tanh and pow in 16 and 32 \
             bits only)"
        )));
    }
    let es = t.size();
    let tn = t.name();
    let imm = [0u32; pf::WORDS];
    match *op {
        Op::Fill { out, len, value } => {
            let p = pipe(shared, format!("fill_{tn}"), 3, || wgsl::fill(t))?;
            let mut imm = imm;
            set_scalar(&mut imm, t, 0, scalar_bits(value, t));
            elementwise(
                shared,
                stream,
                &p,
                [None, None, Some(Operand::of(out, es))],
                None,
                len as u64,
                imm,
            )
        }
        Op::Axpy { alpha, x, y, len } => {
            let p = pipe(shared, format!("axpy_{tn}"), 3, || wgsl::axpy(t))?;
            let mut imm = imm;
            set_scalar(&mut imm, t, 0, scalar_bits(alpha, t));
            let (x, y) = (Operand::of(x, es), Operand::of(y, es));
            elementwise(
                shared,
                stream,
                &p,
                [Some(x), None, Some(y)],
                None,
                len as u64,
                imm,
            )
        }
        Op::Unary {
            op: u,
            src,
            out,
            len,
        } => {
            let p = pipe(shared, format!("u_{}_{tn}", u.name()), 3, || {
                wgsl::unary(u, t)
            })?;
            let out = Operand::of(out, es);
            let src = src.map(|s| Operand::of(s, es)).unwrap_or(out);
            elementwise(
                shared,
                stream,
                &p,
                [Some(src), None, Some(out)],
                None,
                len as u64,
                imm,
            )
        }
        Op::Clamp {
            lo,
            hi,
            src,
            out,
            len,
        } => {
            let p = pipe(shared, format!("clamp_{tn}"), 3, || wgsl::clamp(t))?;
            let mut imm = imm;
            set_scalar(&mut imm, t, 0, scalar_bits(lo, t));
            set_scalar(&mut imm, t, 1, scalar_bits(hi, t));
            let out = Operand::of(out, es);
            let src = src.map(|s| Operand::of(s, es)).unwrap_or(out);
            elementwise(
                shared,
                stream,
                &p,
                [Some(src), None, Some(out)],
                None,
                len as u64,
                imm,
            )
        }
        Op::Binary {
            op: b,
            src,
            ref rhs,
            out,
            shape,
        } => {
            let p = pipe(shared, format!("b_{}_{tn}", b.name()), 3, || {
                wgsl::binary(b, t)
            })?;
            let out = Operand::of(out, es);
            let src = src.map(|s| Operand::of(s, es)).unwrap_or(out);
            let len = (shape.rows as u64) * (shape.cols as u64);
            let mut imm = imm;
            imm[pf::COLS] = u32_of(shape.cols.max(1) as u64, "a row length")?;
            let (mode, other, vector) = match *rhs {
                Rhs::Array(r) => (0, Some(Operand::of(r, es)), None),
                Rhs::Row(r) => (1, None, Some((Operand::of(r, es), shape.cols as u64))),
                Rhs::Col(r) => (2, None, Some((Operand::of(r, es), shape.rows as u64))),
                Rhs::Scalar(s) => {
                    set_scalar(&mut imm, t, 0, scalar_bits(s, t));
                    (3, None, None)
                }
            };
            imm[pf::MODE] = mode;
            elementwise(
                shared,
                stream,
                &p,
                [Some(src), other, Some(out)],
                vector,
                len,
                imm,
            )
        }
        Op::Cast { to, src, out, len } => {
            let to_t = wt(shared, to, "cast")?;
            let p = pipe(shared, format!("cast_{tn}_{}", to_t.name()), 3, || {
                wgsl::cast(t, to_t)
            })?;
            let (s, o) = (Operand::of(src, es), Operand::of(out, to_t.size()));
            elementwise(
                shared,
                stream,
                &p,
                [Some(s), None, Some(o)],
                None,
                len as u64,
                imm,
            )
        }
        Op::Reduce {
            op: r,
            x,
            shape,
            out,
        } => {
            let out_es = if r.is_index() { 4 } else { es };
            reduce(
                shared,
                stream,
                t,
                ReduceKind::Op(r),
                Operand::of(x, es),
                None,
                shape.rows as u64,
                shape.cols as u64,
                Operand::of(out, out_es),
            )
        }
        Op::Dot { x, y, len, out } => reduce(
            shared,
            stream,
            t,
            ReduceKind::Dot,
            Operand::of(x, es),
            Some(Operand::of(y, es)),
            1,
            len as u64,
            Operand::of(out, es),
        ),
        Op::Softmax {
            log,
            src,
            out,
            shape,
        } => {
            let out = Operand::of(out, es);
            let src = src.map(|s| Operand::of(s, es)).unwrap_or(out);
            let n = shape.rows as u64 * shape.cols as u64;
            let mut imm = imm;
            imm[pf::MODE] = u32::from(log);
            let (bi, oi) = src.whole(shared, n, "a softmax input")?;
            let (bo, oo) = out.whole(shared, n, "a softmax output")?;
            row_kernel(
                shared,
                stream,
                t,
                [bi, Bind::dummy(shared), bo, Bind::dummy(shared)],
                [oi, 0, oo, 0],
                shape.rows as u64,
                shape.cols as u64,
                imm,
            )
        }
        Op::CrossEntropy {
            logits,
            labels,
            loss,
            grad,
            shape,
        } => {
            let n = shape.rows as u64 * shape.cols as u64;
            let (bi, oi) = Operand::of(logits, es).whole(shared, n, "cross-entropy logits")?;
            let (bl, ol) =
                Operand::of(labels, 4).whole(shared, shape.rows as u64, "cross-entropy labels")?;
            let (bo, oo) =
                Operand::of(loss, es).whole(shared, shape.rows as u64, "cross-entropy losses")?;
            let (bg, og) = match grad {
                Some(g) => Operand::of(g, es).whole(shared, n, "a cross-entropy gradient")?,
                None => (Bind::dummy(shared), 0),
            };
            let mut imm = imm;
            imm[pf::MODE] = 2;
            imm[pf::FLAGS] = u32::from(grad.is_some());
            row_kernel(
                shared,
                stream,
                t,
                [bi, bl, bo, bg],
                [oi, ol, oo, og],
                shape.rows as u64,
                shape.cols as u64,
                imm,
            )
        }
        Op::Gemm { g, a, b, c } => {
            let span =
                |size: usize, stride: usize| g.span(size, stride).unwrap_or(usize::MAX) as u64;
            let (ba, oa) = Operand::of(a, es).whole(
                shared,
                span(g.m * g.k, g.stride_a),
                "a gemm operand A",
            )?;
            let (bb, ob) = Operand::of(b, es).whole(
                shared,
                span(g.k * g.n, g.stride_b),
                "a gemm operand B",
            )?;
            let (bc, oc) = Operand::of(c, es).whole(
                shared,
                span(g.m * g.n, g.stride_c),
                "a gemm operand C",
            )?;
            let max = shared.limits.max_compute_workgroups_per_dimension;
            let gx = u32_of((g.n as u64).div_ceil(16), "gemm columns")?;
            let gy = u32_of((g.m as u64).div_ceil(16), "gemm rows")?;
            if gx > max || gy > max {
                return Err(unsupported(format!(
                    "a {} x {} gemm (more than {} tiles of 16 along a side)",
                    g.m, g.n, max
                )));
            }
            let p = pipe(shared, format!("gemm_{tn}"), 3, || wgsl::gemm(t))?;
            let mut imm = imm;
            imm[pf::ROWS] = u32_of(g.m as u64, "gemm rows")?;
            imm[pf::COLS] = u32_of(g.n as u64, "gemm columns")?;
            imm[pf::K] = u32_of(g.k as u64, "gemm depth")?;
            imm[pf::BATCH] = u32_of(g.batch as u64, "a gemm batch")?;
            imm[pf::SA] = u32_of(g.stride_a as u64, "a gemm stride")?;
            imm[pf::SB] = u32_of(g.stride_b as u64, "a gemm stride")?;
            imm[pf::SC] = u32_of(g.stride_c as u64, "a gemm stride")?;
            imm[pf::FLAGS] = u32::from(g.trans_a) | (u32::from(g.trans_b) << 1);
            let bits = |v: f64| {
                if t == Wt::F64 {
                    v.to_bits()
                } else {
                    u64::from((v as f32).to_bits())
                }
            };
            set_scalar(&mut imm, t, 0, bits(g.alpha));
            set_scalar(&mut imm, t, 1, bits(g.beta));
            imm[pf::O0] = oa;
            imm[pf::O1] = ob;
            imm[pf::O2] = oc;
            let gz = (g.batch as u32).min(max);
            dispatch(shared, stream, &p, &[ba, bb, bc], &imm, [gx, gy, gz])
        }
    }
}

/// Softmax or cross-entropy: one workgroup per row.
#[allow(clippy::too_many_arguments)]
fn row_kernel(
    shared: &Shared,
    stream: &StreamInner,
    t: Wt,
    binds: [Bind<'_>; 4],
    offs: [u32; 4],
    rows: u64,
    cols: u64,
    mut imm: [u32; pf::WORDS],
) -> Result<()> {
    let f64_ok = caps(shared).f64;
    let p = pipe(shared, format!("softmax_{}", t.name()), 4, || {
        wgsl::softmax(t, f64_ok)
    })?;
    imm[pf::ROWS] = u32_of(rows, "rows")?;
    imm[pf::COLS] = u32_of(cols, "a row length")?;
    imm[pf::O0] = offs[0];
    imm[pf::O1] = offs[1];
    imm[pf::O2] = offs[2];
    imm[pf::S0] = offs[3];
    let g = (rows as u32).min(shared.limits.max_compute_workgroups_per_dimension);
    dispatch(shared, stream, &p, &binds, &imm, [g, 1, 1])
}

/// A reduction of each of `rows` rows of `cols` items: one pass when rows are many or
/// short, else per-part partials into a scratch buffer and a second pass over them.
#[allow(clippy::too_many_arguments)]
fn reduce(
    shared: &Shared,
    stream: &StreamInner,
    t: Wt,
    kind: ReduceKind,
    x: Operand<'_>,
    y: Option<Operand<'_>>,
    rows: u64,
    cols: u64,
    out: Operand<'_>,
) -> Result<()> {
    let f64_ok = caps(shared).f64;
    let part_bytes = wgsl::part_bytes(wgsl::acc_type(kind, t, f64_ok));
    let n = rows * cols;
    let (bx, ox) = x.whole(shared, n, "a reduction input")?;
    let (by, oy) = match y {
        Some(y) => y.whole(shared, n, "a dot product input")?,
        None => (Bind::dummy(shared), 0),
    };
    let (bo, oo) = out.whole(shared, rows, "a reduction output")?;
    let max = u64::from(shared.limits.max_compute_workgroups_per_dimension);
    let parts = if rows >= 64 || cols <= 8192 {
        1
    } else {
        cols.div_ceil(4096).min(1024)
    };
    let tn = t.name();
    let kname = match kind {
        ReduceKind::Op(r) => r.name(),
        ReduceKind::Dot => "dot",
    };
    let mut imm = [0u32; pf::WORDS];
    imm[pf::ROWS] = u32_of(rows, "rows")?;
    imm[pf::COLS] = u32_of(cols, "a row length")?;
    imm[pf::N] = u32_of(cols, "a row length")?;
    imm[pf::O0] = ox;
    imm[pf::O1] = oy;
    imm[pf::O2] = oo;
    let gy = rows.min(max) as u32;
    let p1 = pipe(shared, format!("reduce1_{kname}_{tn}"), 4, || {
        wgsl::reduce(kind, t, false, f64_ok)
    })?;
    if parts == 1 {
        imm[pf::K] = 1;
        imm[pf::FLAGS] = 1;
        return dispatch(
            shared,
            stream,
            &p1,
            &[bx, by, bo, Bind::dummy(shared)],
            &imm,
            [1, gy, 1],
        );
    }
    let scratch_bytes = rows * parts * part_bytes;
    if scratch_bytes > shared.max_binding {
        return Err(unsupported(format!(
            "a reduction needing {scratch_bytes} bytes of partials"
        )));
    }
    let scratch = shared.scoped("Device::create_buffer", || {
        shared.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gpukit reduction partials"),
            size: scratch_bytes,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
    })?;
    let bs = Bind {
        buf: &scratch,
        base: 0,
        size: scratch_bytes,
    };
    imm[pf::K] = parts as u32;
    imm[pf::FLAGS] = 0;
    dispatch(
        shared,
        stream,
        &p1,
        &[bx, by, bo, bs],
        &imm,
        [parts as u32, gy, 1],
    )?;
    let p2 = pipe(shared, format!("reduce2_{kname}_{tn}"), 4, || {
        wgsl::reduce(kind, t, true, f64_ok)
    })?;
    imm[pf::COLS] = parts as u32;
    imm[pf::K] = 1;
    imm[pf::FLAGS] = 1;
    dispatch(shared, stream, &p2, &[bx, by, bo, bs], &imm, [1, gy, 1])
}

/// A byte copy between device ranges with the copy kernel (unaligned ranges, or both in one
/// buffer, which wgpu's copy command refuses), in windows.
fn copy_kernel(
    shared: &Shared,
    stream: &StreamInner,
    src: (&wgpu::Buffer, u64),
    dst: (&wgpu::Buffer, u64),
    bytes: u64,
) -> Result<()> {
    let p = pipe(shared, "copy_bytes".into(), 3, wgsl::copy_bytes)?;
    let chunk = shared.max_binding - shared.align - 8;
    let mut done = 0u64;
    while done < bytes {
        let n = chunk.min(bytes - done);
        let win = |buf: &wgpu::Buffer, first: u64| {
            let base = first / shared.align * shared.align;
            let end = round4(first + n).min(buf.size());
            (base, end - base, first - base)
        };
        let (sb, ss, so) = win(src.0, src.1 + done);
        let (db, ds, doff) = win(dst.0, dst.1 + done);
        let mut imm = [0u32; pf::WORDS];
        imm[pf::N] = n as u32;
        imm[pf::O0] = so as u32;
        imm[pf::O2] = doff as u32;
        let binds = [
            Bind {
                buf: src.0,
                base: sb,
                size: ss,
            },
            Bind::dummy(shared),
            Bind {
                buf: dst.0,
                base: db,
                size: ds,
            },
        ];
        let words = (doff + n).div_ceil(4);
        dispatch(
            shared,
            stream,
            &p,
            &binds,
            &imm,
            [groups_for(shared, words), 1, 1],
        )?;
        done += n;
    }
    Ok(())
}

/// A device-to-device copy: wgpu's copy command where it allows (4-byte aligned, two
/// buffers), else the copy kernel.
pub(crate) fn copy_d2d(
    shared: &Shared,
    stream: &StreamInner,
    src: BufAt<'_, WgpuBackend>,
    dst: BufAt<'_, WgpuBackend>,
    bytes: usize,
) -> Result<()> {
    copy_raw(
        shared,
        stream,
        (&src.buf.buf, src.offset as u64),
        (&dst.buf.buf, dst.offset as u64),
        bytes as u64,
    )
}

/// [`copy_d2d`] on raw buffers and byte offsets.
pub(crate) fn copy_raw(
    shared: &Shared,
    stream: &StreamInner,
    src: (&wgpu::Buffer, u64),
    dst: (&wgpu::Buffer, u64),
    n: u64,
) -> Result<()> {
    let (so, doff) = (src.1, dst.1);
    if src.0 != dst.0 && so % 4 == 0 && doff % 4 == 0 && n.is_multiple_of(4) {
        return stream.record(|enc| enc.copy_buffer_to_buffer(src.0, so, dst.0, doff, n));
    }
    copy_kernel(shared, stream, src, dst, n)
}

/// A host-to-device copy: the bytes go into a new staging buffer now (after the stream's
/// earlier downloads have landed, as they may write them), and from there to `dst` in
/// stream order.
///
/// # Safety
///
/// As [`gpukit_core::Backend::copy_h2d`].
pub(crate) unsafe fn upload(
    shared: &Shared,
    stream: &StreamInner,
    src: *const u8,
    dst: BufAt<'_, WgpuBackend>,
    bytes: usize,
) -> Result<()> {
    shared.check()?;
    let upto = stream.position();
    if stream.host_pending_upto(upto) {
        stream.drive(upto, true)?;
    }
    let (doff, n) = (dst.offset as u64, bytes as u64);
    // SAFETY: the caller keeps `src..src + bytes` readable (Backend::copy_h2d).
    let from = unsafe { std::slice::from_raw_parts(src, bytes) };
    let mapped_err = |e: wgpu::MapRangeError| Error::Backend {
        backend: NAME,
        call: "Buffer::get_mapped_range_mut",
        message: e.to_string(),
    };
    if doff % 4 == 0 && n % 4 == 0 {
        // A pooled staging buffer, mapped for writing, then wgpu's copy command.
        let staging = shared.staging.take_upload(shared, n)?;
        {
            let mut view = staging
                .slice(..n)
                .get_mapped_range_mut()
                .map_err(mapped_err)?;
            view.copy_from_slice(from);
        }
        staging.unmap();
        return stream.record_upload(staging, &dst.buf.buf, doff, n);
    }
    // Unaligned: a staging buffer the copy kernel can bind (storage buffers cannot be
    // mapped for writing), written while mapped at creation.
    let staging = shared.scoped("Device::create_buffer", || {
        shared.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gpukit upload staging (unaligned)"),
            size: round4(n),
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::STORAGE,
            mapped_at_creation: true,
        })
    })?;
    {
        let mut view = staging
            .slice(..)
            .get_mapped_range_mut()
            .map_err(mapped_err)?;
        view.slice(..bytes).copy_from_slice(from);
    }
    staging.unmap();
    copy_kernel(shared, stream, (&staging, 0), (&dst.buf.buf, doff), n)
}

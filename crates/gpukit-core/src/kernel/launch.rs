//! A kernel loaded on a context ([`Kernel`]) and its launch on a stream, ordered like any
//! op over its array arguments.

use std::marker::PhantomData;

use crate::backend::{Backend, KernelArg, LaunchLimits};
use crate::error::Result;
use crate::stackvec::StackVec;
use crate::stream::Stream;
use crate::track::{Access, SliceRef};

use super::*;

/// A kernel loaded on a context, typed by its signature.
pub struct Kernel<S: KernelSig, B: Backend> {
    raw: B::Kernel,
    name: String,
    context: u64,
    limits: LaunchLimits,
    /// A `#[kernel]`'s tag in its context's fault log.
    tag: Option<u32>,
    /// Whether its GPU code checks its accesses.
    checks: bool,
    /// Whether a launch may report a fault (its accesses are checked, or it reports indices
    /// itself, or has atomics).
    may_fault: bool,
    _s: PhantomData<fn(S)>,
}

impl<S: KernelSig, B: Backend> std::fmt::Debug for Kernel<S, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.name)
            .field("context", &self.context)
            .finish()
    }
}

impl<S: KernelSig, B: Backend> Kernel<S, B> {
    pub(crate) fn load(home: &Stream<B>, spec: KernelSpec<S>) -> Result<Self> {
        let raw = home.backend().load_kernel(&spec.desc)?;
        let tag = match &spec.desc.checked {
            Some(abi) => Some(home.shared_arc().faults.register(
                home.backend(),
                &spec.desc.name,
                abi,
            )?),
            None => None,
        };
        Ok(Kernel {
            raw,
            name: spec.desc.name,
            context: home.context_id(),
            limits: home.shared_arc().info.limits,
            tag,
            checks: spec.desc.checked.as_ref().is_some_and(|c| c.checks),
            may_fault: spec
                .desc
                .checked
                .as_ref()
                .is_some_and(|c| c.checks || c.unchecked_faults),
            _s: PhantomData,
        })
    }

    /// Its tag in its context's fault log (a checked kernel's).
    pub(crate) fn tag(&self) -> Option<u32> {
        self.tag
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether every access of the kernel is bounds-checked (a `#[kernel]`'s are, unless
    /// made [`KernelSpec::unchecked`]).
    pub fn is_checked(&self) -> bool {
        self.checks
    }
}

impl<B: Backend> Stream<B> {
    /// Launches a kernel with arguments matching its signature, after checking the
    /// configuration against the device's limits. Array arguments are ordered against other
    /// streams like any op's: [`In`] as reads, [`Out`] as writes.
    pub fn launch<S: KernelSig, A: LaunchArgs<B, S>>(
        &self,
        kernel: &Kernel<S, B>,
        cfg: LaunchConfig,
        args: A,
    ) -> Result<()> {
        self.launch_as("launch", kernel, None, cfg, args)
    }

    /// [`Stream::launch`] on behalf of the call `call` (a built-in op), which its errors
    /// name; a checked kernel's faults are reported under `tag` where given (else its own).
    // Out of line: inlined into every op it makes their frames large, which costs the
    // facade's ops more than the call.
    #[inline(never)]
    pub(crate) fn launch_as<S: KernelSig, A: LaunchArgs<B, S>>(
        &self,
        call: &'static str,
        kernel: &Kernel<S, B>,
        tag: Option<u32>,
        cfg: LaunchConfig,
        args: A,
    ) -> Result<()> {
        self.shared_arc()
            .same_context(call, "kernel", kernel.context)?;
        cfg.validate(&kernel.name, &kernel.limits)?;
        // The graph's fault record while capturing (declared first: the argument list
        // borrows it).
        let captured;
        // Everything on the stack: a launch allocates nothing. One pass over the arguments
        // builds the backend's list and keeps the arrays' ranges, in order, for the ordering
        // and the checked convention.
        let mut raw = StackVec::<KernelArg<'_, B>, MAX_LAUNCH_ARGS>::new();
        let mut ranges = StackVec::<(SliceRef<'_, B>, Access), MAX_KERNEL_ARGS>::new();
        args.each_arg(|a| match a {
            ArgRef::Read(s) | ArgRef::Write(s) => {
                let access = if matches!(a, ArgRef::Write(_)) {
                    Access::Write
                } else {
                    Access::Read
                };
                raw.push(KernelArg::Buffer {
                    at: s.at(),
                    bytes: s.bytes(),
                    write: access == Access::Write,
                });
                ranges.push((s, access));
            }
            ArgRef::Scalar { bytes, len } => raw.push(KernelArg::Scalar { bytes, len }),
        });
        let mut accesses = StackVec::<_, MAX_KERNEL_ARGS>::new();
        for (s, access) in &ranges {
            accesses.push(("kernel argument", s, *access));
        }
        // The record its faults go to: the stream's (or the capture's, which its graph's
        // replays write), allocated at the first checked launch.
        let record = match kernel.tag {
            None => None,
            Some(_) if self.is_capturing() => {
                captured = self.capture_fault_record()?;
                Some(&*captured)
            }
            Some(_) => Some(self.fault_record()?),
        };
        let checked = record.zip(kernel.tag.map(|own| tag.unwrap_or(own)));
        if let Some((record, tag)) = checked {
            // The checked convention: each array's length in bytes (where the backend takes
            // them), the tag, the fault record (untracked: kernels only claim it atomically).
            if self.backend().checked_lengths() {
                for (s, _) in &ranges {
                    raw.push(KernelArg::scalar(&(s.bytes() as u64).to_ne_bytes()));
                }
            }
            raw.push(KernelArg::scalar(&tag.to_ne_bytes()));
            raw.push(KernelArg::Buffer {
                at: Some(record.at()),
                bytes: FAULT_WORDS * 4,
                write: true,
            });
        }
        self.enqueue(call, &accesses, || {
            if let (Some((record, _)), true) = (checked, kernel.may_fault) {
                record.launched();
            }
            // SAFETY: the kernel's GPU code was vouched for by the caller of the unsafe
            // `KernelSpec::cuda`/`ptx` (or generated, bounds-checked, by `#[kernel]`, with
            // the checked convention's arguments appended above) to take the signature
            // `S`, which the sealed `LaunchArgs` built these arguments from (a CPU
            // closure is safe Rust); every range comes from a checked view of this
            // context's arrays; `enqueue` ordered the ranges after conflicting uses and
            // records this one, so no buffer is freed before the launch has run; written
            // arguments are `&mut` borrows or views, so no written range overlaps another
            // argument; the fault record is a buffer of its own that lives as long as the
            // stream (or the graph) and, while work that uses it may run, the context's
            // log, and is only ever claimed atomically.
            unsafe { self.backend().launch(self.raw(), &kernel.raw, &cfg, &raw) }
        })
    }
}

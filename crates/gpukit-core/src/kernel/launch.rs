//! A kernel loaded on a context ([`Kernel`]) and its launch on a stream, ordered like any
//! op over its array arguments.

use std::marker::PhantomData;

use crate::backend::{Backend, KernelArg, LaunchLimits};
use crate::error::Result;
use crate::stackvec::StackVec;
use crate::stream::Stream;
use crate::track::Access;

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
        // Everything on the stack: a launch allocates nothing.
        let mut resolved = ArgList::<B>::new();
        args.each_arg(|a| resolved.push(a));
        let mut accesses = StackVec::<_, MAX_KERNEL_ARGS>::new();
        for a in &resolved {
            match a {
                ArgRef::Read(s) => accesses.push(("kernel argument", s, Access::Read)),
                ArgRef::Write(s) => accesses.push(("kernel argument", s, Access::Write)),
                ArgRef::Scalar { .. } => {}
            }
        }
        // The record its faults go to: the stream's (or the capture's, which its graph's
        // replays write), allocated at the first checked launch.
        let captured;
        let record = match kernel.tag {
            None => None,
            Some(_) if self.is_capturing() => {
                captured = self.capture_fault_record()?;
                Some(&*captured)
            }
            Some(_) => Some(self.fault_record()?),
        };
        self.enqueue(call, &accesses, || {
            // Pushed in place (collecting would build the inline array and then move it).
            let mut raw = StackVec::<KernelArg<'_, B>, MAX_LAUNCH_ARGS>::new();
            for a in &resolved {
                raw.push(match a {
                    ArgRef::Read(s) => KernelArg::Buffer {
                        at: s.at(),
                        bytes: s.bytes(),
                        write: false,
                    },
                    ArgRef::Write(s) => KernelArg::Buffer {
                        at: s.at(),
                        bytes: s.bytes(),
                        write: true,
                    },
                    ArgRef::Scalar { bytes, len } => KernelArg::Scalar {
                        bytes: *bytes,
                        len: *len,
                    },
                });
            }
            if let (Some(record), Some(tag)) = (record, kernel.tag.map(|own| tag.unwrap_or(own))) {
                if kernel.may_fault {
                    record.launched();
                }
                // The checked convention: each array's length in bytes, the tag, the
                // fault record (untracked: kernels only claim it atomically).
                for a in &resolved {
                    if let ArgRef::Read(s) | ArgRef::Write(s) = a {
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

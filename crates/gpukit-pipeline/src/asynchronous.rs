//! [`Pipeline::run_async`]: a pipeline whose sink is async, awaited in the caller's task,
//! while the pipeline's own thread drives the device; no thread of the async runtime blocks.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use gpukit_core::{Backend, Stream};

use crate::arrays::{Arrays, Batch, Filled};
use crate::builder::Pipeline;
use crate::error::{BoxError, PipelineError, Stage};
use crate::report::Report;

/// What the pipeline's thread and the awaiting task share: one batch at a time, the sink's
/// answer, the end.
struct Handoff<M, O> {
    state: Mutex<State<M, O>>,
    answered: Condvar,
}

struct State<M, O> {
    /// A delivered batch, for the async sink.
    batch: Option<(Batch<M>, O)>,
    /// The async sink's answer for it.
    answer: Option<Result<(), BoxError>>,
    /// The run's result, once the pipeline's thread has finished.
    done: Option<Result<Report, PipelineError>>,
    /// The awaiting task.
    waker: Option<Waker>,
    /// The future was dropped: the pipeline stops at its next delivery.
    abandoned: bool,
}

impl<M, O> Handoff<M, O> {
    fn lock(&self) -> MutexGuard<'_, State<M, O>> {
        // Plain assignments only: a panic elsewhere leaves it consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From the pipeline's thread: hands over a batch and waits for the sink's answer.
    fn deliver(&self, batch: Batch<M>, outputs: O) -> Result<(), BoxError> {
        let waker = {
            let mut st = self.lock();
            if st.abandoned {
                return Err("the run_async future was dropped".into());
            }
            st.batch = Some((batch, outputs));
            st.waker.take()
        };
        // Woken outside the lock: an executor may poll the task from inside `wake`.
        if let Some(w) = waker {
            w.wake();
        }
        let mut st = self.lock();
        loop {
            if let Some(answer) = st.answer.take() {
                return answer;
            }
            if st.abandoned {
                return Err("the run_async future was dropped".into());
            }
            st = self.answered.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// From the pipeline's thread: the run's result.
    fn finish(&self, result: Result<Report, PipelineError>) {
        let waker = {
            let mut st = self.lock();
            st.done = Some(result);
            st.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// What the awaiting task is woken for.
enum Next<M, O> {
    Batch(Batch<M>, O),
    Done(Box<Result<Report, PipelineError>>),
}

/// Marks the handoff abandoned when the awaiting future goes (also when it is dropped
/// before the run ends), so the pipeline's thread stops instead of waiting for an answer.
struct Abandon<M, O>(Arc<Handoff<M, O>>);

impl<M, O> Drop for Abandon<M, O> {
    fn drop(&mut self) {
        self.0.lock().abandoned = true;
        self.0.answered.notify_all();
    }
}

/// Sets the run's result if the pipeline's thread ends without one (a panic in the engine
/// itself; the stages' panics are already its typed errors).
struct Finish<M, O>(Arc<Handoff<M, O>>);

impl<M, O> Drop for Finish<M, O> {
    fn drop(&mut self) {
        if self.0.lock().done.is_none() {
            self.0.finish(Err(PipelineError::Stage {
                batch: 0,
                stage: Stage::Deliver,
                source: "the pipeline's thread panicked".into(),
            }));
        }
    }
}

impl<B, In, Out> Pipeline<B, In, Out>
where
    B: Backend,
    In: Arrays<B>,
    Out: Arrays<B>,
{
    /// [`run`](Pipeline::run) for async programs: the sink is an async closure, awaited in
    /// the caller's task (so it may await anything of its runtime: a socket, a channel, a
    /// tokio timer), while the pipeline runs on a thread of its own (with its loader
    /// thread, as `run`'s). Nothing blocks a thread of the runtime, and the library depends
    /// on no runtime.
    ///
    /// The same stages and guarantees as `run`: batches reach the sink in order, one at a
    /// time; the next batch is delivered once the sink's future for this one is done (the
    /// device keeps working on later batches meanwhile, up to the pattern's depth); a sink
    /// error (or panic) stops the run and is the error of the `Deliver` stage of that batch.
    /// The outputs arrive as owned vectors (`Vec<T>`, or a tuple of them): one host copy of
    /// each batch's outputs, made on the pipeline's thread, so the sink may keep them. The
    /// load and compute functions run on the pipeline's threads, so they are `Send` and
    /// `'static`. Dropping the future stops the run at the next delivery (the work queued
    /// finishes, every buffer is released, on the pipeline's thread).
    ///
    /// ```
    /// use gpukit::{Pattern, Pipeline};
    ///
    /// let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let pipeline = Pipeline::new(&ctx, Pattern::Triple)
    ///     .batches(4)
    ///     .max_rows(8)
    ///     .input::<f32>(1)
    ///     .output::<f32>(1);
    /// let rt = tokio::runtime::Builder::new_current_thread().build()?;
    /// let mut sums = Vec::new();
    /// let report = rt.block_on(pipeline.run_async(
    ///     |i, x| { x.fill(i as f32); Ok(x.len()) },
    ///     |s, _b, x, y| { s.copy(x, y)?; s.scale(2.0, y) },
    ///     async |b, y: Vec<f32>| {
    ///         tokio::task::yield_now().await;             // anything awaitable
    ///         sums.push((b.index, y.iter().sum::<f32>()));
    ///         Ok(())
    ///     },
    /// ))?;
    /// assert_eq!(sums, [(0, 0.0), (1, 16.0), (2, 32.0), (3, 48.0)]);
    /// assert_eq!(report.batches, 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_async<M, F, L, C, S>(
        &self,
        load: L,
        compute: C,
        mut sink: S,
    ) -> impl Future<Output = Result<Report, PipelineError>>
    where
        M: Send + 'static,
        F: Filled<M>,
        L: for<'a> FnMut(usize, In::HostMut<'a>) -> Result<F, BoxError> + Send + 'static,
        C: for<'a, 'b> FnMut(
                &Stream<B>,
                &Batch<M>,
                &In::Views<'a>,
                &mut Out::ViewsMut<'b>,
            ) -> gpukit_core::Result<()>
            + Send
            + 'static,
        S: AsyncFnMut(Batch<M>, Out::Owned) -> Result<(), BoxError>,
    {
        let handoff = Arc::new(Handoff {
            state: Mutex::new(State {
                batch: None,
                answer: None,
                done: None,
                waker: None,
                abandoned: false,
            }),
            answered: Condvar::new(),
        });
        let pipeline = self.same();
        let h = handoff.clone();
        let started = std::thread::Builder::new()
            .name("gpukit-pipeline".into())
            .spawn(move || {
                let finish = Finish(h.clone());
                let result = pipeline.run(load, compute, |batch: Batch<M>, outputs| {
                    h.deliver(batch, Out::to_owned(outputs))
                });
                h.finish(result);
                drop(finish);
            });
        let start_error = started.err().map(|e| PipelineError::Stage {
            batch: 0,
            stage: Stage::Load,
            source: format!("could not start the pipeline's thread: {e}").into(),
        });
        // Made before the future, and moved into it: dropped with it, even unpolled.
        let abandon = Abandon(handoff.clone());
        async move {
            if let Some(e) = start_error {
                drop(abandon);
                return Err(e);
            }
            loop {
                let next = std::future::poll_fn(|cx| {
                    let mut st = handoff.lock();
                    if let Some((batch, outputs)) = st.batch.take() {
                        return Poll::Ready(Next::Batch(batch, outputs));
                    }
                    if let Some(result) = st.done.take() {
                        return Poll::Ready(Next::Done(Box::new(result)));
                    }
                    st.waker = Some(cx.waker().clone());
                    Poll::Pending
                })
                .await;
                match next {
                    Next::Batch(batch, outputs) => {
                        let answer = sink(batch, outputs).await;
                        handoff.lock().answer = Some(answer);
                        handoff.answered.notify_all();
                    }
                    Next::Done(result) => {
                        drop(abandon);
                        return *result;
                    }
                }
            }
        }
    }
}

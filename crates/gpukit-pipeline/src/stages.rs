//! The user's stages as the engine calls them: a load function ([`UserLoad`]) or an
//! iterator of owned batches ([`IterLoad`]) behind [`LoadFn`], and compute and sink
//! closures with shared state ([`Stateful`]) behind [`StageFns`].

use std::marker::PhantomData;

use gpukit_core::{Backend, Stream};

use crate::arrays::{Arrays, Batch, Filled};
use crate::error::BoxError;

/// A load stage: fills a batch's staging buffers, returns its rows and host data.
pub(crate) trait LoadFn<B: Backend, In: Arrays<B>, M>: Send {
    fn load(
        &mut self,
        i: usize,
        staging: &mut In::Staging,
        widths: &[usize],
        max_rows: usize,
    ) -> Result<(usize, M), BoxError>;
}

/// The user's load function.
pub(crate) struct UserLoad<L, F>(L, PhantomData<fn() -> F>);

impl<L, F> UserLoad<L, F> {
    pub(crate) fn new(load: L) -> Self {
        UserLoad(load, PhantomData)
    }
}

impl<B, In, M, F, L> LoadFn<B, In, M> for UserLoad<L, F>
where
    B: Backend,
    In: Arrays<B>,
    F: Filled<M>,
    L: for<'a> FnMut(usize, In::HostMut<'a>) -> Result<F, BoxError> + Send,
{
    fn load(
        &mut self,
        i: usize,
        staging: &mut In::Staging,
        _widths: &[usize],
        _max_rows: usize,
    ) -> Result<(usize, M), BoxError> {
        (self.0)(i, In::host_mut(staging)).map(Filled::into_parts)
    }
}

/// Batches from an iterator of owned vectors.
pub(crate) struct IterLoad<I>(I);

impl<I> IterLoad<I> {
    pub(crate) fn new(iter: I) -> Self {
        IterLoad(iter)
    }
}

impl<B, In, I> LoadFn<B, In, ()> for IterLoad<I>
where
    B: Backend,
    In: Arrays<B>,
    I: Iterator<Item = In::Owned> + Send,
{
    fn load(
        &mut self,
        i: usize,
        staging: &mut In::Staging,
        widths: &[usize],
        max_rows: usize,
    ) -> Result<(usize, ()), BoxError> {
        let item = self
            .0
            .next()
            .ok_or_else(|| format!("the iterator ended before batch {i}"))?;
        let rows = In::owned_rows(&item, widths)?;
        // A batch over the maximum is not copied; the engine reports it as too long.
        if rows <= max_rows {
            In::fill_from(item, staging);
        }
        Ok((rows, ()))
    }
}

/// The compute and deliver stages, with or without state they share.
pub(crate) trait StageFns<B: Backend, In: Arrays<B>, Out: Arrays<B>, M, St> {
    fn compute(
        &mut self,
        state: &mut St,
        stream: &Stream<B>,
        batch: &Batch<M>,
        inputs: &In::Views<'_>,
        outputs: &mut Out::ViewsMut<'_>,
    ) -> gpukit_core::Result<()>;

    fn sink(
        &mut self,
        state: &mut St,
        batch: Batch<M>,
        outputs: Out::Host<'_>,
    ) -> Result<(), BoxError>;
}

/// Compute and sink closures that take `&mut` state in turn.
pub(crate) struct Stateful<C, S> {
    pub(crate) compute: C,
    pub(crate) sink: S,
}

impl<B, In, Out, M, St, C, S> StageFns<B, In, Out, M, St> for Stateful<C, S>
where
    B: Backend,
    In: Arrays<B>,
    Out: Arrays<B>,
    C: for<'a, 'b> FnMut(
        &mut St,
        &Stream<B>,
        &Batch<M>,
        &In::Views<'a>,
        &mut Out::ViewsMut<'b>,
    ) -> gpukit_core::Result<()>,
    S: for<'a> FnMut(&mut St, Batch<M>, Out::Host<'a>) -> Result<(), BoxError>,
{
    fn compute(
        &mut self,
        state: &mut St,
        stream: &Stream<B>,
        batch: &Batch<M>,
        inputs: &In::Views<'_>,
        outputs: &mut Out::ViewsMut<'_>,
    ) -> gpukit_core::Result<()> {
        (self.compute)(state, stream, batch, inputs, outputs)
    }

    fn sink(
        &mut self,
        state: &mut St,
        batch: Batch<M>,
        outputs: Out::Host<'_>,
    ) -> Result<(), BoxError> {
        (self.sink)(state, batch, outputs)
    }
}

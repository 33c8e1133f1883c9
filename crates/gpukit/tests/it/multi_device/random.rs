//! Properties of the collectives on random group sizes (1 to 4), lengths (0 to 299), ops
//! and element types (f32, i32), through the suite's property harness (`props::check`:
//! `PROPTEST_CASES` raises the case count):
//!
//! - `all_reduce_into` gives the host reference, bit for bit, on every rank (`avg` on
//!   integers is refused, the destinations unchanged);
//! - `reduce_scatter_into` then `all_gather_into` gives what `all_reduce` gives.

use super::*;

use crate::props::{check, OrFail};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

#[derive(Debug, Clone)]
struct Case {
    ranks: usize,
    len: usize,
    op: CollectiveOp,
    ints: bool,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1..=4usize,
        prop_oneof![1 => Just(0usize), 1 => 1..=8usize, 6 => 0..300usize],
        proptest::sample::select(CollectiveOp::ALL.to_vec()),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(ranks, len, op, ints, seed)| Case {
            ranks,
            len,
            op,
            ints,
            seed,
        })
}

/// Fails the case unless `got` has the bits of `want`.
fn same_bits<T: Bits>(got: &[T], want: &[T], what: &str) -> Result<(), TestCaseError> {
    let differ = got.len() != want.len() || got.iter().zip(want).any(|(g, w)| g.bits() != w.bits());
    if differ {
        return Err(TestCaseError::fail(format!(
            "{what}: got {got:?}, expected {want:?}"
        )));
    }
    Ok(())
}

fn laws<T: Reduce>(ctxs: &[Context], c: &Case) -> Result<(), TestCaseError> {
    let ctxs = &ctxs[..c.ranks];
    let comm = communicator(ctxs).tc()?;
    let data: Vec<Vec<T>> = (0..c.ranks).map(|r| T::values(c.seed, r, c.len)).collect();
    let src = upload_all(ctxs, &data).tc()?;
    let before = vec![T::values(c.seed ^ 1, 9, c.len); c.ranks];
    let mut dst = upload_all(ctxs, &before).tc()?;

    if c.op == CollectiveOp::Avg && !T::DTYPE.is_float() {
        let r = comm.all_reduce_into(&src, &mut dst, c.op);
        prop_assert!(
            matches!(r, Err(gpukit::Error::InvalidArgument { arg: "op", .. })),
            "{r:?}"
        );
        for (r, got) in download_all(&dst).tc()?.iter().enumerate() {
            same_bits(got, &before[r], &format!("refused avg: rank {r}"))?;
        }
        return Ok(());
    }

    let want = reference(&data, c.op);
    comm.all_reduce_into(&src, &mut dst, c.op).tc()?;
    for (r, got) in download_all(&dst).tc()?.iter().enumerate() {
        same_bits(got, &want, &format!("all_reduce_into: rank {r}"))?;
    }

    // Reduce-scatter then all-gather over the first `ranks * part` elements, against an
    // in-place all-reduce of the same elements.
    let part = c.len / c.ranks;
    let total = part * c.ranks;
    let head: Vec<Vec<T>> = data.iter().map(|d| d[..total].to_vec()).collect();
    let src = upload_all(ctxs, &head).tc()?;
    let mut parts = upload_all(ctxs, &vec![T::values(2, 2, part); c.ranks]).tc()?;
    let mut gathered = upload_all(ctxs, &vec![T::values(3, 3, total); c.ranks]).tc()?;
    comm.reduce_scatter_into(&src, &mut parts, c.op).tc()?;
    comm.all_gather_into(&parts, &mut gathered).tc()?;
    let mut in_place = upload_all(ctxs, &head).tc()?;
    comm.all_reduce(&mut in_place, c.op).tc()?;
    let all_reduced = download_all(&in_place).tc()?;
    same_bits(&all_reduced[0], &want[..total], "all_reduce: rank 0")?;
    for (r, got) in download_all(&gathered).tc()?.iter().enumerate() {
        same_bits(
            got,
            &all_reduced[r],
            &format!("reduce_scatter + all_gather: rank {r}"),
        )?;
    }
    Ok(())
}

#[test]
fn collectives_match_the_reference_and_each_other() -> Result<()> {
    let ctxs = cpus(4)?;
    check(256, case(), |c| match c.ints {
        false => laws::<f32>(&ctxs, &c),
        true => laws::<i32>(&ctxs, &c),
    })
}

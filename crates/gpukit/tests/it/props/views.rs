//! The laws of views: nested slicing, out-of-range requests, writes through mutable views, `split_at_mut`.

use super::*;

type Range = (Bound<usize>, Bound<usize>);

/// A bound inside, at or just past the end of a length-`len` array, or absurdly far.
fn bound(len: usize) -> impl Strategy<Value = Bound<usize>> {
    prop_oneof![
        2 => Just(Bound::Unbounded),
        4 => (0..=len + 2).prop_map(Bound::Included),
        4 => (0..=len + 2).prop_map(Bound::Excluded),
        1 => Just(Bound::Included(usize::MAX)),
        1 => Just(Bound::Excluded(usize::MAX)),
    ]
}

#[derive(Debug, Clone)]
struct ViewCase {
    len: usize,
    outer: Range,
    inner: Range,
    write: Range,
    mid: usize,
    left_to_right: bool,
    seed: u32,
}

fn view_case() -> impl Strategy<Value = ViewCase> {
    length(300)
        .prop_flat_map(|len| {
            (
                Just(len),
                (bound(len), bound(len)),
                (bound(len), bound(len / 2 + 1)),
                (bound(len), bound(len)),
                0..=len + 2,
                any::<bool>(),
                any::<u32>(),
            )
        })
        .prop_map(
            |(len, outer, inner, write, mid, left_to_right, seed)| ViewCase {
                len,
                outer,
                inner,
                write,
                mid,
                left_to_right,
                seed,
            },
        )
}

/// `start..end` of a range over `len` elements, as std's slicing resolves it.
fn resolve(r: Range, len: usize) -> Option<(usize, usize)> {
    let host: Vec<u8> = vec![0; len];
    let part = host.get(r)?;
    let start = part.as_ptr() as usize - host.as_ptr() as usize;
    Some((start, start + part.len()))
}

fn out_of_range<T>(r: gpukit::Result<T>, len: usize) -> Result<(), TestCaseError> {
    match r {
        Err(gpukit::Error::OutOfRange { len: l, .. }) if l == len => Ok(()),
        Err(e) => Err(TestCaseError::fail(format!(
            "expected OutOfRange for length {len}, got {e}"
        ))),
        Ok(_) => Err(TestCaseError::fail(format!(
            "expected OutOfRange for length {len}, got a view"
        ))),
    }
}

fn view_laws(ctx: &gpukit::Context) -> gpukit::Result<()> {
    check(512, view_case(), |c| {
        let to_i = |v: Vec<f32>| {
            v.into_iter()
                .map(|x| (x * 64.0) as i32)
                .collect::<Vec<i32>>()
        };
        let mut host = to_i(data(c.seed, c.len));
        let mut a = ctx.alloc_upload(&host).tc()?;

        // Whole-array views.
        prop_assert_eq!(a.slice(..).tc()?.download().tc()?, host.clone());
        prop_assert_eq!(a.as_view_mut().download().tc()?, host.clone());

        // Nested read-only slicing equals host slicing; out of range is an error.
        match host.get(c.outer) {
            Some(h1) => {
                let v1 = a.slice(c.outer).tc()?;
                let (start, _) = resolve(c.outer, c.len).expect("std accepted it");
                prop_assert_eq!(v1.len(), h1.len());
                prop_assert_eq!(v1.offset(), start);
                prop_assert_eq!(v1.download().tc()?, h1.to_vec());
                match h1.get(c.inner) {
                    Some(h2) => {
                        let v2 = v1.slice(c.inner).tc()?;
                        prop_assert_eq!(v2.len(), h2.len());
                        prop_assert_eq!(v2.download().tc()?, h2.to_vec());
                        prop_assert_eq!(v2.slice(..).tc()?.download().tc()?, h2.to_vec());
                    }
                    None => out_of_range(v1.slice(c.inner), h1.len())?,
                }
            }
            None => {
                out_of_range(a.slice(c.outer), c.len)?;
                out_of_range(a.slice_mut(c.outer), c.len)?;
            }
        }

        // Writing through a mutable view changes exactly its range; nested mutable views
        // and ops on views too.
        match resolve(c.write, c.len) {
            Some((s, e)) => {
                let new = to_i(data(c.seed ^ 0x5555, e - s));
                let mut w = a.slice_mut(c.write).tc()?;
                prop_assert_eq!(w.len(), e - s);
                prop_assert_eq!(w.offset(), s);
                w.upload(&new).tc()?;
                host[s..e].copy_from_slice(&new);
                match resolve(c.inner, e - s) {
                    Some((s2, e2)) => {
                        let mut inner = w.slice_mut(c.inner).tc()?;
                        prop_assert_eq!(inner.offset(), s + s2);
                        ctx.fill(&mut inner, -7).tc()?;
                        host[s + s2..s + e2].fill(-7);
                        prop_assert_eq!(inner.download().tc()?, host[s + s2..s + e2].to_vec());
                    }
                    None => out_of_range(w.slice_mut(c.inner), e - s)?,
                }
                prop_assert_eq!(a.download().tc()?, host.clone());

                // Splitting a view: halves at the right offsets, with the right contents.
                out_of_range(a.slice_mut(c.write).tc()?.into_split_at(e - s + 1), e - s)?;
                let w = a.slice_mut(c.write).tc()?;
                let m = c.mid % (e - s + 1);
                let (l, r) = w.into_split_at(m).tc()?;
                prop_assert_eq!((l.offset(), r.offset()), (s, s + m));
                prop_assert_eq!(l.download().tc()?, host[s..s + m].to_vec());
                prop_assert_eq!(r.download().tc()?, host[s + m..e].to_vec());
            }
            None => {
                out_of_range(a.slice_mut(c.write), c.len)?;
                prop_assert_eq!(a.download().tc()?, host.clone(), "a rejected view wrote");
            }
        }

        // split_at_mut: lengths, contents, and copies between the halves.
        if c.mid > c.len {
            prop_assert!(
                matches!(a.split_at_mut(c.mid), Err(gpukit::Error::OutOfRange { .. })),
                "split_at_mut({}) of {}",
                c.mid,
                c.len
            );
        } else {
            let mid = c.mid;
            let (mut l, mut r) = a.split_at_mut(mid).tc()?;
            prop_assert_eq!((l.len(), r.len()), (mid, c.len - mid));
            prop_assert_eq!((l.offset(), r.offset()), (0, mid));
            let mut both = l.download().tc()?;
            both.extend(r.download().tc()?);
            prop_assert_eq!(&both, &host);
            let k = mid.min(c.len - mid);
            if c.left_to_right {
                // The last k of the left half into the first k of the right half.
                let from = l.as_view().slice(mid - k..).tc()?;
                ctx.copy(&from, &mut r.slice_mut(..k).tc()?).tc()?;
                host.copy_within(mid - k..mid, mid);
            } else {
                // The last k of the right half into the first k of the left half.
                let from = r.as_view().slice(c.len - mid - k..).tc()?;
                ctx.copy(&from, &mut l.slice_mut(..k).tc()?).tc()?;
                host.copy_within(c.len - k.., 0);
            }
            prop_assert_eq!(a.download().tc()?, host);
        }
        Ok(())
    })
}

backend_tests! {
    fn views_follow_slice_laws(ctx) {
        view_laws(ctx)
    }
}

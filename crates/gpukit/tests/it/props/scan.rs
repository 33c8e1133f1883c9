//! `cumsum` against the prefix sums computed on the host: exact wrapping sums for the
//! integers, an error-free float64 sum within the documented bound for the floats, on
//! random lengths across one, two and three levels of tiles, through views, and its bad
//! input.

use super::*;

/// An element type `cumsum` takes, with the reference it is held to.
trait ScanRef: Numeric + std::fmt::Debug {
    fn strategy() -> BoxedStrategy<Self>;
    /// `Ok` if every `got[i]` is the prefix sum of `x[..=i]` (within the documented bound).
    fn check(x: &[Self], got: &[Self]) -> Result<(), TestCaseError>;
}

macro_rules! int_scan {
    ($($t:ty),*) => {$(
        impl ScanRef for $t {
            fn strategy() -> BoxedStrategy<Self> {
                prop_oneof![4 => any::<$t>(), 2 => (0 as $t)..4, 1 => Just(<$t>::MAX)].boxed()
            }
            fn check(x: &[Self], got: &[Self]) -> Result<(), TestCaseError> {
                let mut acc: $t = 0;
                for (i, (&v, &g)) in x.iter().zip(got).enumerate() {
                    acc = acc.wrapping_add(v);
                    prop_assert_eq!(g, acc, "cumsum [{}] of {}", i, x.len());
                }
                Ok(())
            }
        }
    )*};
}

int_scan!(i32, u32, i64, u64, u8, i8);

/// A sum of f64s without rounding error beyond the last (Neumaier's), the exact reference.
struct ExactSum {
    sum: f64,
    carry: f64,
}

impl ExactSum {
    fn add(&mut self, v: f64) {
        let t = self.sum + v;
        self.carry += if self.sum.abs() >= v.abs() {
            (self.sum - t) + v
        } else {
            (v - t) + self.sum
        };
        self.sum = t;
    }
}

/// The levels of 256-element tiles of `n` elements.
fn levels(n: usize) -> f64 {
    let mut levels = 1.0;
    let mut tiles = n.div_ceil(256);
    while tiles > 1 {
        levels += 1.0;
        tiles = tiles.div_ceil(256);
    }
    levels
}

macro_rules! float_scan {
    ($($t:ty: $from:expr, $strategy:expr, $k:expr;)*) => {$(
        impl ScanRef for $t {
            fn strategy() -> BoxedStrategy<Self> {
                $strategy.prop_map($from).boxed()
            }
            fn check(x: &[Self], got: &[Self]) -> Result<(), TestCaseError> {
                // The documented bound, relative to the sum of magnitudes.
                let k: f64 = $k(levels(x.len()));
                let (mut exact, mut scale) = (ExactSum { sum: 0.0, carry: 0.0 }, 0.0f64);
                for (i, (&v, &g)) in x.iter().zip(got).enumerate() {
                    exact.add(f64::from(v));
                    scale += f64::from(v).abs();
                    let want = exact.sum + exact.carry;
                    prop_assert!(
                        (f64::from(g) - want).abs() <= k * scale,
                        "cumsum [{}] of {}: got {}, want {} (bound {})",
                        i,
                        x.len(),
                        g,
                        want,
                        k * scale
                    );
                }
                Ok(())
            }
        }
    )*};
}

fn wide_values() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => -1e3..1e3f64,
        2 => -1.0..1.0f64,
        1 => Just(0.0),
        1 => (-20i32..20).prop_map(f64::from),
    ]
}

/// Values whose sums stay well inside f16's range over 70 000 elements.
fn half_values() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => -1.0..1.0f64,
        1 => Just(0.0),
        1 => (-4i32..4).prop_map(f64::from),
    ]
}

use gpukit::core::half::{bf16, f16};

float_scan!(
    // 258 additions per level of 256-element tiles, in the type.
    f32: |v| v as f32, wide_values(), |l: f64| 258.0 * l * f64::from(f32::EPSILON);
    f64: |v| v, wide_values(), |l: f64| 258.0 * l * f64::EPSILON;
    // Computed in f32; each output and each tile's total rounded to the type.
    f16: f16::from_f64, half_values(),
        |l: f64| l * f64::from(f16::EPSILON) + 258.0 * l * f64::from(f32::EPSILON);
    bf16: bf16::from_f64, half_values(),
        |l: f64| l * f64::from(bf16::EPSILON) + 258.0 * l * f64::from(f32::EPSILON);
);

/// Lengths over one level of tiles (up to 256), two (up to 65536) and three.
fn scan_length() -> impl Strategy<Value = usize> {
    prop_oneof![
        1 => Just(0usize),
        3 => 1..=300usize,
        3 => 300..=70_000usize,
        1 => Just(256usize),
        1 => Just(65_536usize),
        1 => 65_537..=66_000usize,
    ]
}

fn cumsum_matches_the_host<T: ScanRef + Numeric>(ctx: &gpukit::Context) -> gpukit::Result<()> {
    let strategy = (scan_length(), 0..3usize)
        .prop_flat_map(|(n, skip)| (vec(T::strategy(), n + skip), Just(skip)));
    check(12, strategy, |(host, skip)| {
        let x = ctx.alloc_upload(&host).tc()?;
        let n = host.len() - skip;
        let mut out = ctx.alloc_zeros::<T>(n + 2).tc()?;
        // Through views: the input past `skip` elements, the output between guards.
        {
            let xv = x.slice(skip..).tc()?;
            let mut ov = out.slice_mut(1..n + 1).tc()?;
            ctx.cumsum(&xv, &mut ov).tc()?;
        }
        let got = out.download().tc()?;
        prop_assert!(got[0] == T::ZERO && got[n + 1] == T::ZERO, "guards written");
        T::check(&host[skip..], &got[1..n + 1])
    })
}

backend_tests! {
    fn cumsum_f32_is_within_its_bound(ctx) {
        cumsum_matches_the_host::<f32>(ctx)
    }

    fn cumsum_f64_is_within_its_bound(ctx) {
        cumsum_matches_the_host::<f64>(ctx)
    }

    fn cumsum_i32_u32_wrap_exactly(ctx) {
        cumsum_matches_the_host::<i32>(ctx)?;
        cumsum_matches_the_host::<u32>(ctx)
    }

    fn cumsum_i64_u64_wrap_exactly(ctx) {
        cumsum_matches_the_host::<i64>(ctx)?;
        cumsum_matches_the_host::<u64>(ctx)
    }

    fn cumsum_f16_bf16_are_within_their_bound(ctx) {
        cumsum_matches_the_host::<f16>(ctx)?;
        cumsum_matches_the_host::<bf16>(ctx)
    }

    fn cumsum_u8_i8_wrap_exactly(ctx) {
        cumsum_matches_the_host::<u8>(ctx)?;
        cumsum_matches_the_host::<i8>(ctx)
    }

    fn cumsum_spans_a_grid_of_more_than_65535_tiles(ctx) {
        // 65535 tiles of 256 fill the grid's x; the rest go along y.
        let n = 65_535 * 256 + 3 * 256 + 5;
        let host: Vec<u8> = (0..n).map(|i| (i * 7 + i / 256) as u8).collect();
        let x = ctx.alloc_upload(&host)?;
        let mut out = ctx.alloc::<u8>(n)?;
        ctx.cumsum(&x, &mut out)?;
        let got = out.download()?;
        let mut acc = 0u8;
        for (i, (&v, &g)) in host.iter().zip(&got).enumerate() {
            acc = acc.wrapping_add(v);
            assert_eq!(g, acc, "cumsum [{i}] of {n}");
        }
        Ok(())
    }

    fn cumsum_in_a_captured_graph_replays_with_new_input(ctx) {
        // Three levels of tiles: the scratch totals the capture allocates live as long as
        // the graph.
        let n = 70_000;
        let mut x = ctx.alloc_upload(&vec![1u32; n])?;
        let mut out = ctx.alloc::<u32>(n)?;
        let graph = match ctx.capture(|s| s.cumsum(&x, &mut out)) {
            // Vulkan has no graphs.
            Err(gpukit::Error::Unsupported { .. }) if ctx.backend_name() == "vulkan" => return Ok(()),
            other => other?,
        };
        for k in 1..=3u32 {
            x.upload(&vec![k; n])?;
            graph.launch(ctx)?;
            let want: Vec<u32> = (1..=n as u32).map(|i| i * k).collect();
            assert_eq!(out.download()?, want, "replay {k}");
        }
        Ok(())
    }

    fn cumsum_rejects_bad_input_and_changes_nothing(ctx) {
        let x = ctx.alloc_upload(&[1u32, 2, 3])?;
        let mut out = ctx.alloc_upload(&[7u32, 7])?;
        let e = ctx.cumsum(&x, &mut out).expect_err("lengths differ");
        assert!(e.to_string().contains("cumsum"), "{e}");
        assert_eq!(out.download()?, [7, 7]);
        let other = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
        let y = other.alloc_upload(&[1u32, 2])?;
        let e = ctx.cumsum(&y, &mut out).expect_err("another context");
        assert!(e.to_string().contains("cumsum"), "{e}");
        assert_eq!(out.download()?, [7, 7]);
        Ok(())
    }
}

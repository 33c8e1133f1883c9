//! Arrays larger than one storage binding: the backend opened with a 1 KiB binding limit,
//! so that every array here spans many windows, checked against the same work on the host.
//! Element-wise ops, broadcasts, casts and copies (aligned or not, within one buffer or
//! between two) work in windows; the ops that need a whole operand in one binding say so
//! with a typed `Unsupported`. Without a Vulkan driver each test prints `SKIPPED: <reason>`
//! (with `GPU_REQUIRE_VULKAN=1` it fails instead).

mod common;

use gpukit_core::{Context, Error, Shape};
use gpukit_wgpu::{WgpuBackend, WgpuOptions};

/// The binding limit the tests impose.
const BINDING: u64 = 1024;

fn open() -> Option<Context<WgpuBackend>> {
    common::open(WgpuOptions {
        max_binding: Some(BINDING),
        ..Default::default()
    })
}

#[test]
fn the_limit_is_the_one_asked_for() {
    let Some(ctx) = open() else { return };
    assert_eq!(ctx.backend().max_binding(), BINDING);
}

#[test]
fn element_wise_ops_and_broadcasts_span_windows() -> gpukit_core::Result<()> {
    let Some(ctx) = open() else { return Ok(()) };
    let n = 10_007; // about 40 windows of f32, not a multiple of anything
    let a: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.5 - 20.0).collect();
    let b: Vec<f32> = (0..n).map(|i| (i % 13) as f32 + 1.0).collect();
    let (da, db) = (ctx.alloc_upload(&a)?, ctx.alloc_upload(&b)?);
    let mut out = ctx.alloc_zeros::<f32>(n)?;
    ctx.mul(&da, &db, &mut out)?;
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
    assert_eq!(out.download()?, want);

    // Views at odd element offsets, in place.
    let mut x = ctx.alloc_upload(&a)?;
    {
        let mut v = x.slice_mut(3..n - 5)?;
        ctx.relu_inplace(&mut v)?;
    }
    let mut want = a.clone();
    for w in &mut want[3..n - 5] {
        *w = w.max(0.0);
    }
    assert_eq!(x.download()?, want);

    // A row vector over a matrix of many windows; a column vector likewise.
    let shape = Shape::new(91, 110);
    let m: Vec<f32> = (0..shape.rows * shape.cols).map(|i| i as f32).collect();
    let row: Vec<f32> = (0..shape.cols).map(|j| j as f32 * 0.25).collect();
    let col: Vec<f32> = (0..shape.rows).map(|r| r as f32 + 0.5).collect();
    let dm = ctx.alloc_upload(&m)?;
    let mut o = ctx.alloc_zeros::<f32>(m.len())?;
    ctx.add_row(shape, &dm, &ctx.alloc_upload(&row)?, &mut o)?;
    let want: Vec<f32> = m
        .iter()
        .enumerate()
        .map(|(i, v)| v + row[i % shape.cols])
        .collect();
    assert_eq!(o.download()?, want);
    ctx.mul_col(shape, &dm, &ctx.alloc_upload(&col)?, &mut o)?;
    let want: Vec<f32> = m
        .iter()
        .enumerate()
        .map(|(i, v)| v * col[i / shape.cols])
        .collect();
    assert_eq!(o.download()?, want);

    // Packed bytes: u8 arithmetic wraps, windows and words included.
    let bytes: Vec<u8> = (0..5001u32).map(|i| (i * 7 % 256) as u8).collect();
    let du = ctx.alloc_upload(&bytes)?;
    let mut ou = ctx.alloc_zeros::<u8>(bytes.len())?;
    ctx.add_scalar(&du, 200u8, &mut ou)?;
    let want: Vec<u8> = bytes.iter().map(|v| v.wrapping_add(200)).collect();
    assert_eq!(ou.download()?, want);

    // A cast across windows of different element sizes.
    let mut oi = ctx.alloc_zeros::<i32>(n)?;
    ctx.cast(&da, &mut oi)?;
    let want: Vec<i32> = a.iter().map(|&v| v as i32).collect();
    assert_eq!(oi.download()?, want);
    Ok(())
}

#[test]
fn copies_span_windows_aligned_or_not() -> gpukit_core::Result<()> {
    let Some(ctx) = open() else { return Ok(()) };
    let data: Vec<u8> = (0..9_999u32).map(|i| (i * 31 % 251) as u8).collect();
    // Upload and download at odd byte offsets (views of a byte array).
    let mut a = ctx.alloc_zeros::<u8>(data.len() + 8)?;
    a.slice_mut(3..3 + data.len())?.upload(&data)?;
    let back = a.slice(3..3 + data.len())?.download()?;
    assert_eq!(back, data);
    let all = a.download()?;
    assert_eq!(&all[..3], &[0, 0, 0], "bytes before the view were written");
    assert_eq!(
        &all[3 + data.len()..],
        &[0; 5],
        "bytes after the view were written"
    );

    // Device to device within one buffer (wgpu's copy command refuses that) and unaligned.
    {
        let (left, mut right) = a.split_at_mut(5000)?;
        let from = left.as_view();
        ctx.copy(&from.slice(7..4007)?, &mut right.slice_mut(1..4001)?)?;
    }
    let got = a.download()?;
    let mut want = all.clone();
    want.copy_within(7..4007, 5001);
    assert_eq!(got, want);

    // Between two arrays, aligned: the copy command.
    let f: Vec<f32> = (0..3000).map(|i| i as f32).collect();
    let src = ctx.alloc_upload(&f)?;
    let mut dst = ctx.alloc_zeros::<f32>(3000)?;
    src.copy_to(&mut dst)?;
    assert_eq!(dst.download()?, f);
    Ok(())
}

#[test]
fn ops_needing_a_whole_operand_say_so() -> gpukit_core::Result<()> {
    let Some(ctx) = open() else { return Ok(()) };
    let big = ctx.alloc_upload(&vec![1.0f32; 1000])?; // 4000 bytes > 1 KiB
    let r = ctx.sum(&big);
    assert!(
        matches!(&r, Err(Error::Unsupported { what, .. }) if what.contains("binding")),
        "{r:?}"
    );
    // The context stays usable, and a reduction inside one binding works.
    let small = ctx.alloc_upload(&[1.0f32, 2.0, 3.5])?;
    assert_eq!(ctx.sum(&small)?, 6.5);
    Ok(())
}

#[test]
fn mask_ops_count_and_arange_span_windows() -> gpukit_core::Result<()> {
    use gpukit_core::optable::CmpOp;
    let Some(ctx) = open() else { return Ok(()) };
    let n = 5_003; // about 20 windows of f32, and 5 of the u8 mask
    let a: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..n).map(|i| (i % 5) as f32 - 2.0).collect();
    let (da, db) = (ctx.alloc_upload(&a)?, ctx.alloc_upload(&b)?);
    let mut mask = ctx.alloc::<u8>(n)?;
    ctx.compare(CmpOp::Lt, &da, &db, &mut mask)?;
    let want: Vec<u8> = a.iter().zip(&b).map(|(x, y)| u8::from(x < y)).collect();
    assert_eq!(mask.download()?, want);
    let mut out = ctx.alloc::<f32>(n)?;
    ctx.select(&mask, &da, &db, &mut out)?;
    let picked: Vec<f32> = (0..n)
        .map(|i| if want[i] != 0 { a[i] } else { b[i] })
        .collect();
    assert_eq!(out.download()?, picked);
    ctx.ge_scalar(&da, 0.0, &mut mask)?;
    ctx.select_scalar(&mask, &da, -9.0, &mut out)?;
    let kept: Vec<f32> = a.iter().map(|&x| if x >= 0.0 { x } else { -9.0 }).collect();
    assert_eq!(out.download()?, kept);
    let mut count = ctx.alloc::<u32>(1)?;
    ctx.count_eq_into(&da, &db, &mut count)?;
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count() as u32;
    assert_eq!(count.download()?, [same]);
    ctx.arange(&mut out, 0.5f32, 0.25)?;
    let steps: Vec<f32> = (0..n).map(|i| 0.5 + i as f32 * 0.25).collect();
    assert_eq!(out.download()?, steps);
    // cumsum needs its arrays whole: a typed refusal, the context usable after.
    let mut sums = ctx.alloc::<f32>(n)?;
    let r = ctx.cumsum(&da, &mut sums);
    assert!(
        matches!(&r, Err(Error::Unsupported { what, .. }) if what.contains("binding")),
        "{r:?}"
    );
    let small = ctx.alloc_upload(&[1.0f32, 2.0, 3.5])?;
    let mut s3 = ctx.alloc::<f32>(3)?;
    ctx.cumsum(&small, &mut s3)?;
    assert_eq!(s3.download()?, [1.0, 3.0, 6.5]);
    Ok(())
}

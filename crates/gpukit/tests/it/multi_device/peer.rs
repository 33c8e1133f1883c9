//! `Stream::copy_peer` between logical CPU devices: every element type, views, empty
//! copies, and a source whose `Context` handle is gone.

use super::*;

/// Copies `data` from `from` to `to` and back to a second array of `from`, checking the
/// bits each way.
fn there_and_back<T: Bits>(from: &Context, to: &Context, data: &[T]) -> Result<()> {
    let what = T::DTYPE.to_string();
    let a = from.alloc_upload(data)?;
    let mut b = to.alloc_zeros::<T>(data.len())?;
    to.copy_peer(&a, &mut b)?;
    assert_bits(&b.download()?, data, &format!("{what} there"));
    let mut c = from.alloc_zeros::<T>(data.len())?;
    from.copy_peer(&b, &mut c)?;
    assert_bits(&c.download()?, data, &format!("{what} back"));
    Ok(())
}

/// `len` values of `T` from the bits of a xorshift stream (every bit pattern is a value of
/// every element type; the floats include NaNs and infinities where the bits say so).
fn patterns<T: Bits>(seed: u64, len: usize, from_bits: impl Fn(u64) -> T) -> Vec<T> {
    xorshift(seed).take(len).map(from_bits).collect()
}

#[test]
fn peer_copies_every_element_type() -> Result<()> {
    let ctxs = cpus(3)?;
    // Device 0 to 1 and back, and 2 to 0 and back.
    for (from, to) in [(&ctxs[0], &ctxs[1]), (&ctxs[2], &ctxs[0])] {
        there_and_back(
            from,
            to,
            &[
                0.0f32,
                -0.0,
                1.5,
                f32::MAX,
                f32::MIN_POSITIVE / 4.0,
                f32::INFINITY,
                f32::NAN,
            ],
        )?;
        there_and_back(from, to, &floats(1, 1001))?;
        there_and_back(
            from,
            to,
            &[0.0f64, -0.0, -1e300, 1e-310, f64::NEG_INFINITY, f64::NAN],
        )?;
        there_and_back(from, to, &patterns(2, 777, f64::from_bits))?;
        there_and_back(from, to, &[i32::MIN, -1, 0, 1, i32::MAX])?;
        there_and_back(from, to, &ints(3, 1000))?;
        there_and_back(from, to, &patterns(4, 513, |u| u as u32))?;
        there_and_back(from, to, &[i64::MIN, -1, 0, i64::MAX])?;
        there_and_back(from, to, &patterns(5, 300, |u| u as i64))?;
        there_and_back(from, to, &patterns(6, 301, |u| u))?;
        there_and_back(from, to, &(-128..=127).collect::<Vec<i8>>())?;
        there_and_back(from, to, &(0..=255).cycle().take(1003).collect::<Vec<u8>>())?;
        there_and_back(
            from,
            to,
            &[
                f16::NAN,
                f16::NEG_ZERO,
                f16::INFINITY,
                f16::MAX,
                f16::from_f32(0.1),
            ],
        )?;
        there_and_back(from, to, &patterns(7, 999, |u| f16::from_bits(u as u16)))?;
        there_and_back(
            from,
            to,
            &[
                bf16::NAN,
                bf16::NEG_ZERO,
                bf16::NEG_INFINITY,
                bf16::MIN,
                bf16::from_f32(0.1),
            ],
        )?;
        there_and_back(from, to, &patterns(8, 998, |u| bf16::from_bits(u as u16)))?;
    }
    Ok(())
}

#[test]
fn peer_copies_a_larger_array_on_another_stream() -> Result<()> {
    // Past the size up to which the CPU backend copies in place on the calling thread.
    let ctxs = cpus(2)?;
    let data = floats(9, (1 << 20) / 4 * 3 + 5);
    let a = ctxs[0].alloc_upload(&data)?;
    let mut b = ctxs[1].alloc_zeros::<f32>(data.len())?;
    let s = ctxs[1].create_stream()?;
    s.copy_peer(&a, &mut b)?;
    assert_bits(&b.download()?, &data, "3 MiB copy");
    Ok(())
}

#[test]
fn peer_copies_between_views() -> Result<()> {
    let ctxs = cpus(2)?;
    let src: Vec<i32> = (0..10).collect();
    let a = ctxs[0].alloc_upload(&src)?;
    let mut b = ctxs[1].alloc_upload(&[-1i32; 10])?;

    // A view into a view.
    ctxs[1].copy_peer(&a.slice(2..7)?, &mut b.slice_mut(3..8)?)?;
    assert_eq!(b.download()?, [-1, -1, -1, 2, 3, 4, 5, 6, -1, -1]);
    // A view of a view of the source, into a whole array.
    let mut c = ctxs[1].alloc_zeros::<i32>(3)?;
    ctxs[1].copy_peer(&a.slice(4..)?.slice(1..4)?, &mut c)?;
    assert_eq!(c.download()?, [5, 6, 7]);
    // A whole array into a view of all of the destination.
    ctxs[1].copy_peer(&a, &mut b.slice_mut(..)?)?;
    assert_eq!(b.download()?, src);
    // A split destination: each half from the other end of the source.
    let mut d = ctxs[1].alloc_zeros::<i32>(10)?;
    {
        let (mut left, mut right) = d.split_at_mut(5)?;
        ctxs[1].copy_peer(&a.slice(5..)?, &mut left)?;
        ctxs[1].copy_peer(&a.slice(..5)?, &mut right)?;
    }
    assert_eq!(d.download()?, [5, 6, 7, 8, 9, 0, 1, 2, 3, 4]);
    Ok(())
}

#[test]
fn empty_peer_copies_do_nothing() -> Result<()> {
    let ctxs = cpus(2)?;
    let a = ctxs[0].alloc_upload::<f32>(&[])?;
    let mut b = ctxs[1].alloc_zeros::<f32>(0)?;
    ctxs[1].copy_peer(&a, &mut b)?;
    assert!(b.download()?.is_empty());
    // Empty views of arrays that are not empty: the destination keeps its values.
    let full = ctxs[0].alloc_upload(&[1.0f32, 2.0, 3.0])?;
    let mut dst = ctxs[1].alloc_upload(&[7.0f32; 4])?;
    ctxs[1].copy_peer(&full.slice(3..)?, &mut dst.slice_mut(1..1)?)?;
    ctxs[1].copy_peer(&a, &mut dst.slice_mut(4..)?)?;
    assert_eq!(dst.download()?, [7.0; 4]);
    Ok(())
}

#[test]
fn peer_copies_between_two_contexts_of_one_device() -> Result<()> {
    let first = Context::new(DeviceSpec::Cpu(Some(1)))?;
    let second = Context::new(DeviceSpec::Cpu(Some(1)))?;
    assert_eq!(first.device_id(), second.device_id());
    assert_ne!(first.id(), second.id());
    let data = ints(10, 257);
    let a = first.alloc_upload(&data)?;
    let mut b = second.alloc_zeros::<i32>(data.len())?;
    second.copy_peer(&a, &mut b)?;
    assert_eq!(b.download()?, data);
    Ok(())
}

#[test]
fn a_source_outlives_its_context_handle() -> Result<()> {
    let ctxs = cpus(2)?;
    let owner = Context::new(DeviceSpec::Cpu(Some(0)))?;
    let mut a = owner.alloc_upload(&floats(11, 4097))?;
    // Queued on the owner, then the owner's handle goes: the array keeps its context (and
    // its memory and pending work) alive, and the copy sees the fill.
    owner.fill(&mut a, 7.5)?;
    drop(owner);
    let mut b = ctxs[1].alloc_zeros::<f32>(4097)?;
    ctxs[1].copy_peer(&a, &mut b)?;
    assert_eq!(b.download()?, vec![7.5; 4097]);
    // With no context handle left at all, both arrays still read back.
    drop(ctxs);
    assert_eq!(a.download()?, vec![7.5; 4097]);
    assert_eq!(b.download()?, vec![7.5; 4097]);
    Ok(())
}

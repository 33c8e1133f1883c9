//! DLPack: exported arrays share their memory and keep it alive; imported tensors borrow the
//! producer's memory (a write on one side is seen on the other) and go back through the
//! deleter exactly once; the versioned and legacy forms both; bad tensors are typed errors
//! that leave the tensor with its caller. On the CPU backend (the host is the producer and
//! the consumer here), with Vulkan's refusal to export.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use gpukit::core::dlpack::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DL_CPU, DL_CUDA, FLAG_READ_ONLY,
};
use gpukit::{Context, DeviceSpec, Error};

fn cpu() -> Context {
    Context::new(DeviceSpec::Cpu(None)).expect("the CPU backend")
}

/// A foreign producer: host memory, its shape and strides, and a count of deleter calls.
struct Producer {
    data: Vec<f32>,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    deleted: Arc<AtomicUsize>,
}

/// The test producer's deleter of a versioned tensor.
///
/// # Safety
///
/// `t` was made by [`versioned`], and is deleted once.
unsafe extern "C" fn delete_versioned(t: *mut DLManagedTensorVersioned) {
    // SAFETY: a box `versioned` leaked, freed once.
    let b = unsafe { Box::from_raw(t) };
    // SAFETY: its `manager_ctx` is the producer box `versioned` leaked, freed once.
    let p = unsafe { Box::from_raw(b.manager_ctx.cast::<Producer>()) };
    p.deleted.fetch_add(1, Ordering::SeqCst);
}

/// The test producer's deleter of a legacy tensor.
///
/// # Safety
///
/// `t` was made by [`legacy`], and is deleted once.
unsafe extern "C" fn delete_legacy(t: *mut DLManagedTensor) {
    // SAFETY: a box `legacy` leaked, freed once.
    let b = unsafe { Box::from_raw(t) };
    // SAFETY: its `manager_ctx` is the producer box `legacy` leaked, freed once.
    let p = unsafe { Box::from_raw(b.manager_ctx.cast::<Producer>()) };
    p.deleted.fetch_add(1, Ordering::SeqCst);
}

fn tensor_of(p: &mut Producer) -> DLTensor {
    DLTensor {
        data: p.data.as_mut_ptr().cast::<c_void>(),
        device: DLDevice {
            device_type: DL_CPU,
            device_id: 0,
        },
        ndim: p.shape.len() as i32,
        dtype: DLDataType {
            code: 2,
            bits: 32,
            lanes: 1,
        },
        shape: p.shape.as_mut_ptr(),
        strides: p
            .strides
            .as_mut()
            .map_or(std::ptr::null_mut(), |s| s.as_mut_ptr()),
        byte_offset: 0,
    }
}

/// A versioned tensor over `data` (2 x n/2), and its deleter count; the pointer to the data.
fn versioned(
    data: Vec<f32>,
    flags: u64,
) -> (*mut DLManagedTensorVersioned, Arc<AtomicUsize>, *mut f32) {
    let deleted = Arc::new(AtomicUsize::new(0));
    let n = data.len() as i64;
    let mut p = Box::new(Producer {
        data,
        shape: vec![2, n / 2],
        strides: None,
        deleted: deleted.clone(),
    });
    let t = tensor_of(&mut p);
    let ptr = p.data.as_mut_ptr();
    let m = Box::new(DLManagedTensorVersioned {
        version: DLPackVersion { major: 1, minor: 0 },
        manager_ctx: Box::into_raw(p).cast::<c_void>(),
        deleter: Some(delete_versioned),
        flags,
        dl_tensor: t,
    });
    (Box::into_raw(m), deleted, ptr)
}

fn legacy(data: Vec<f32>) -> (*mut DLManagedTensor, Arc<AtomicUsize>, *mut f32) {
    let deleted = Arc::new(AtomicUsize::new(0));
    let n = data.len() as i64;
    let mut p = Box::new(Producer {
        data,
        shape: vec![n],
        strides: Some(vec![1]),
        deleted: deleted.clone(),
    });
    let t = tensor_of(&mut p);
    let ptr = p.data.as_mut_ptr();
    let m = Box::new(DLManagedTensor {
        dl_tensor: t,
        manager_ctx: Box::into_raw(p).cast::<c_void>(),
        deleter: Some(delete_legacy),
    });
    (Box::into_raw(m), deleted, ptr)
}

#[test]
fn an_export_shares_the_memory_and_keeps_it_alive() -> gpukit::Result<()> {
    let ctx = cpu();
    let mut a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
    // A write queued just before the export: the export waits for it.
    ctx.scale(10.0, &mut a)?;
    let t = ctx.to_dlpack(&a, &[2, 3], false)?;
    let m = t.managed();
    assert_eq!(m.version, DLPackVersion { major: 1, minor: 1 });
    assert_eq!(m.flags, 0);
    let dl = &m.dl_tensor;
    assert_eq!(
        (dl.ndim, dl.device.device_type, dl.byte_offset),
        (2, DL_CPU, 0)
    );
    assert_eq!(
        dl.dtype,
        DLDataType {
            code: 2,
            bits: 32,
            lanes: 1
        }
    );
    // SAFETY: the export's shape holds ndim extents.
    let shape = unsafe { std::slice::from_raw_parts(dl.shape, 2) };
    assert_eq!(shape, [2, 3]);
    // The data through its raw address, element by element (a consumer's view of memory the
    // library also reads: no Rust reference to it may outlive one access, as Miri checks).
    let data = dl.data.cast::<f32>();
    // SAFETY: the export's data is six host f32s, alive while `t` is.
    let read = |i: usize| unsafe { data.add(i).read() };
    assert_eq!(
        (0..6).map(read).collect::<Vec<_>>(),
        [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    );
    // Shared both ways: the consumer's write is the array's.
    // SAFETY: as above; the array's work has finished (the export waited for it).
    unsafe { data.write(-1.0) };
    assert_eq!(a.download()?[0], -1.0);
    // The array dropped first: the export still holds the memory, which the pool does not
    // hand out again until the deleter has run.
    let in_use = ctx.memory_stats().bytes_in_use;
    drop(a);
    assert_eq!(
        ctx.memory_stats().bytes_in_use,
        in_use,
        "the export keeps the block in use"
    );
    assert_eq!(read(5), 60.0);
    drop(t);
    assert!(
        ctx.memory_stats().bytes_in_use < in_use,
        "the deleter released the block"
    );
    Ok(())
}

#[test]
fn views_read_only_and_legacy_exports() -> gpukit::Result<()> {
    let ctx = cpu();
    let a = ctx.alloc_upload(&(0..10).collect::<Vec<i32>>())?;
    let t = ctx.to_dlpack(&a.slice(4..10)?, &[6], true)?;
    assert_eq!(t.managed().flags & FLAG_READ_ONLY, FLAG_READ_ONLY);
    assert_eq!(
        t.managed().dl_tensor.dtype,
        DLDataType {
            code: 0,
            bits: 32,
            lanes: 1
        }
    );
    // SAFETY: six host i32s from the view's start.
    let v = unsafe { std::slice::from_raw_parts(t.managed().dl_tensor.data.cast::<i32>(), 6) };
    assert_eq!(v, [4, 5, 6, 7, 8, 9]);
    let l = ctx.to_dlpack_legacy(&a, &[10])?;
    // SAFETY: ten host i32s.
    let w = unsafe { std::slice::from_raw_parts(l.managed().dl_tensor.data.cast::<i32>(), 10) };
    assert_eq!(w[9], 9);
    // Handed out and deleted by the consumer, once.
    let raw = l.into_raw();
    // SAFETY: our own export's deleter, called once as a consumer would.
    unsafe { ((*raw).deleter.expect("a deleter"))(raw) };
    // The handshake form, with the CPU backend's consumer stream (none: the host waits)
    // right after a write on another stream.
    let mut b = ctx.alloc_zeros::<i32>(10)?;
    let side = ctx.create_stream()?;
    side.fill(&mut b, 7)?;
    // SAFETY: `RawStream::None` is always a valid consumer.
    let h = unsafe { ctx.to_dlpack_on(&b, &[10], false, gpukit::RawStream::None) }?;
    // SAFETY: ten host i32s.
    let hv = unsafe { std::slice::from_raw_parts(h.managed().dl_tensor.data.cast::<i32>(), 10) };
    assert_eq!(
        hv, [7; 10],
        "the export was ordered after the other stream's fill"
    );
    // A shape that does not hold the array is refused.
    assert!(matches!(
        ctx.to_dlpack(&a, &[3, 3], false),
        Err(Error::InvalidArgument {
            op: "Stream::to_dlpack",
            arg: "shape",
            ..
        })
    ));
    Ok(())
}

#[test]
fn an_import_borrows_the_producers_memory_and_deletes_once() -> gpukit::Result<()> {
    let ctx = cpu();
    let (raw, deleted, data) = versioned((0..8).map(|i| i as f32).collect(), 0);
    // SAFETY: a live tensor of our producer, used by nothing else meanwhile.
    let mut imported = unsafe { ctx.from_dlpack::<f32>(raw) }?;
    assert_eq!(imported.shape(), [2, 4]);
    assert_eq!(
        imported.array().download()?,
        (0..8).map(|i| i as f32).collect::<Vec<_>>()
    );
    // Our write is the producer's (no copy), once the queued work is done.
    let mut out = ctx.alloc_zeros::<f32>(8)?;
    ctx.add(&imported, &imported, &mut out)?;
    ctx.fill(imported.array_mut()?, 5.0)?;
    ctx.sync()?;
    // SAFETY: the producer's eight floats, alive until the deleter runs.
    assert_eq!(unsafe { std::slice::from_raw_parts(data, 8) }, [5.0; 8]);
    assert_eq!(out.download()?[7], 14.0);
    assert_eq!(deleted.load(Ordering::SeqCst), 0);
    drop(imported);
    assert_eq!(
        deleted.load(Ordering::SeqCst),
        1,
        "the deleter runs once, at the drop"
    );

    // The legacy form; a read-only versioned one refuses writes.
    let (raw, deleted, _) = legacy(vec![1.5; 3]);
    // SAFETY: as above.
    let imported = unsafe { ctx.from_dlpack_legacy::<f32>(raw) }?;
    assert_eq!(imported.array().download()?, [1.5; 3]);
    drop(imported);
    assert_eq!(deleted.load(Ordering::SeqCst), 1);
    let (raw, deleted, _) = versioned(vec![2.0; 4], FLAG_READ_ONLY);
    // SAFETY: as above.
    let mut imported = unsafe { ctx.from_dlpack::<f32>(raw) }?;
    assert!(imported.is_read_only());
    assert!(matches!(
        imported.array_mut(),
        Err(Error::InvalidArgument {
            op: "DlpackArray::array_mut",
            ..
        })
    ));
    drop(imported);
    assert_eq!(deleted.load(Ordering::SeqCst), 1);
    Ok(())
}

#[test]
fn a_reexported_import_keeps_the_producers_memory() -> gpukit::Result<()> {
    let ctx = cpu();
    let (raw, deleted, data) = versioned(vec![7.0; 6], 0);
    // SAFETY: a live tensor of our producer, used by nothing else meanwhile.
    let mut imported = unsafe { ctx.from_dlpack::<f32>(raw) }?;
    ctx.scale(2.0, imported.array_mut()?)?;
    // Handed on (a NumPy tensor passed to PyTorch through us): the export holds the
    // producer's tensor after the import is dropped.
    let t = ctx.to_dlpack(&imported, &[3, 2], false)?;
    drop(imported);
    assert_eq!(
        deleted.load(Ordering::SeqCst),
        0,
        "the export still holds it"
    );
    // SAFETY: the export's data is the producer's six floats, alive while it lives.
    let seen = unsafe { std::slice::from_raw_parts(t.managed().dl_tensor.data.cast::<f32>(), 6) };
    assert_eq!(seen, [14.0; 6]);
    assert_eq!(t.managed().dl_tensor.data.cast::<f32>(), data);
    drop(t);
    assert_eq!(
        deleted.load(Ordering::SeqCst),
        1,
        "released once, with the export"
    );
    Ok(())
}

#[test]
fn a_host_buffer_moves_into_its_export() -> gpukit::Result<()> {
    let ctx = cpu();
    let mut host = ctx.alloc_host::<f32>(6, gpukit::HostUse::Download)?;
    host.copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let retained = ctx.host_pool_stats().retained_bytes;
    // A bad shape gives the buffer back, untouched.
    let host = match host.into_dlpack(&[4, 2], false) {
        Err(r) => {
            assert!(matches!(
                r.error,
                Error::InvalidArgument {
                    op: "HostBuffer::into_dlpack",
                    arg: "shape",
                    ..
                }
            ));
            r.value
        }
        Ok(_) => panic!("a shape of 8 elements for 6 was accepted"),
    };
    assert_eq!(&host[..], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let data = host.as_ptr();
    let t = host.into_dlpack(&[2, 3], true).map_err(|r| r.error)?;
    let m = t.managed();
    assert_eq!(m.dl_tensor.device.device_type, DL_CPU);
    assert_eq!(m.flags, FLAG_READ_ONLY);
    assert_eq!(m.dl_tensor.data.cast::<f32>().cast_const(), data, "no copy");
    // Imported by another context of the CPU backend: the same memory.
    let other = cpu();
    // SAFETY: our own live export, consumed by the import.
    let imported = unsafe { other.from_dlpack::<f32>(t.into_raw()) }?;
    assert_eq!(imported.shape(), [2, 3]);
    assert_eq!(imported.array().download()?, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(
        ctx.host_pool_stats().retained_bytes,
        retained,
        "still exported"
    );
    drop(imported);
    assert!(
        ctx.host_pool_stats().retained_bytes > retained,
        "the buffer went back to the pinned pool with the deleter"
    );
    Ok(())
}

#[test]
fn an_export_imported_back_round_trips() -> gpukit::Result<()> {
    let (a_ctx, b_ctx) = (cpu(), cpu());
    let a = a_ctx.alloc_upload(&[3u8, 1, 4, 1, 5])?;
    let t = a_ctx.to_dlpack(&a, &[5], true)?;
    drop(a);
    // SAFETY: our own live export, consumed by the import (its deleter runs at the drop).
    let imported = unsafe { b_ctx.from_dlpack::<u8>(t.into_raw()) }?;
    assert_eq!(imported.array().download()?, [3, 1, 4, 1, 5]);
    assert!(imported.is_read_only());
    Ok(())
}

#[test]
fn bad_tensors_are_typed_errors_and_stay_with_the_caller() {
    let ctx = cpu();
    let check = |tweak: &dyn Fn(&mut DLManagedTensorVersioned), arg: &str| {
        let (raw, deleted, _) = versioned(vec![0.0; 4], 0);
        // SAFETY: our live tensor, changed before the import.
        unsafe { tweak(&mut *raw) };
        // SAFETY: a live tensor (its fields are what is being checked).
        match unsafe { ctx.from_dlpack::<f32>(raw) } {
            Err(Error::InvalidArgument {
                op: "Context::from_dlpack",
                arg: got,
                ..
            }) => {
                assert_eq!(got, arg)
            }
            other => panic!("{arg}: expected InvalidArgument, got {other:?}"),
        }
        assert_eq!(
            deleted.load(Ordering::SeqCst),
            0,
            "{arg}: a refused tensor is not deleted"
        );
        // SAFETY: still ours: delete it as its producer.
        unsafe { ((*raw).deleter.expect("a deleter"))(raw) };
        assert_eq!(deleted.load(Ordering::SeqCst), 1);
    };
    check(&|t| t.version.major = 2, "tensor");
    check(&|t| t.dl_tensor.dtype.bits = 64, "dtype");
    check(&|t| t.dl_tensor.dtype.code = 0, "dtype");
    check(&|t| t.dl_tensor.device.device_type = DL_CUDA, "device");
    check(&|t| t.dl_tensor.byte_offset = 2, "data");
    check(&|t| t.dl_tensor.ndim = -1, "ndim");
    // SAFETY: the producer's shape holds two extents.
    check(&|t| unsafe { *t.dl_tensor.shape = -2 }, "shape");
    check(&|t| t.dl_tensor.data = std::ptr::null_mut(), "data");
    // Strides of a transposed 2 x 2: not contiguous.
    let strides: *mut i64 = Box::leak(Box::new([1i64, 2])).as_mut_ptr();
    check(
        &|t| {
            t.dl_tensor.shape = Box::leak(Box::new([2i64, 2])).as_mut_ptr();
            t.dl_tensor.strides = strides;
        },
        "strides",
    );
    // SAFETY: a null pointer is refused before anything is read.
    let null = unsafe { ctx.from_dlpack::<f32>(std::ptr::null_mut()) };
    assert!(matches!(
        null,
        Err(Error::InvalidArgument { arg: "tensor", .. })
    ));
}

/// Regression (found by the `dlpack_import` fuzz target): a host tensor whose element count
/// fits a `usize` but whose bytes do not (2^62 `f32`s broadcast from one element by a zero
/// stride) panicked in `from_dlpack_copy` (`Vec::with_capacity`: capacity overflow), and
/// `from_dlpack` refused it in the name of `Context::array_from_raw`; strides whose offsets
/// leave the address space were read through before their overflow was noticed (a wild
/// read). Each is now a typed error of the call, before any read, and the tensor stays with
/// its caller; so is a valid tensor larger than the host can copy (it aborted the process).
#[test]
fn overflowing_sizes_and_strides_are_refused_before_any_read() {
    let ctx = cpu();
    let shaped = |shape: [i64; 1], strides: [i64; 1]| {
        let (raw, deleted, _) = versioned(vec![1.0; 2], 0);
        // SAFETY: our live tensor, changed before it is handed over.
        unsafe {
            (*raw).dl_tensor.ndim = 1;
            (*raw).dl_tensor.shape = Box::leak(Box::new(shape)).as_mut_ptr();
            (*raw).dl_tensor.strides = Box::leak(Box::new(strides)).as_mut_ptr();
        }
        (raw, deleted)
    };
    let give_back = |raw: *mut DLManagedTensorVersioned, deleted: &AtomicUsize| {
        assert_eq!(
            deleted.load(Ordering::SeqCst),
            0,
            "a refused tensor is not deleted"
        );
        // SAFETY: refused, so still ours: delete it as its producer.
        unsafe { ((*raw).deleter.expect("a deleter"))(raw) };
    };

    let (raw, deleted) = shaped([1 << 62], [0]);
    // SAFETY: a live tensor; its one element is all the stride addresses.
    let r = unsafe { ctx.from_dlpack_copy::<f32>(raw) };
    assert!(
        matches!(
            r,
            Err(Error::SizeOverflow {
                op: "Context::from_dlpack_copy",
                ..
            })
        ),
        "{r:?}"
    );
    // Compact (null strides): the import refused it in `Context::array_from_raw`'s name.
    // SAFETY: our live tensor, changed before the call, which refuses it unread.
    unsafe { (*raw).dl_tensor.strides = std::ptr::null_mut() };
    // SAFETY: a live tensor, refused before its data is read.
    let r = unsafe { ctx.from_dlpack::<f32>(raw) };
    assert!(
        matches!(
            r,
            Err(Error::SizeOverflow {
                op: "Context::from_dlpack",
                ..
            })
        ),
        "{r:?}"
    );
    give_back(raw, &deleted);

    // 2^60 bytes fit the address space but not any host: out of memory, not an abort.
    // (Miri stops at an allocation that large instead of failing it.)
    if !cfg!(miri) {
        let (raw, deleted) = shaped([1 << 58], [0]);
        // SAFETY: a live tensor; its one element is all the stride addresses.
        match unsafe { ctx.from_dlpack_copy::<f32>(raw) } {
            Err(Error::OutOfMemory {
                requested, detail, ..
            }) => {
                assert_eq!(requested, 1 << 60);
                assert!(detail.contains("Context::from_dlpack_copy"), "{detail}");
            }
            other => panic!("expected out of memory, got {other:?}"),
        }
        give_back(raw, &deleted);
    }

    // Element 1 is 2^64 + 2^22 bytes past element 0: its address wrapped to 4 MiB past it.
    let (raw, deleted) = shaped([2], [(1 << 62) + (1 << 20)]);
    // SAFETY: a live tensor whose strides overflow (refused before they are followed).
    match unsafe { ctx.from_dlpack_copy::<f32>(raw) } {
        Err(Error::InvalidArgument {
            op: "Context::from_dlpack_copy",
            arg: "strides",
            message,
        }) => assert!(message.contains("address space"), "{message}"),
        other => panic!("expected a strides error, got {other:?}"),
    }
    give_back(raw, &deleted);
}

#[cfg(feature = "vulkan")]
#[test]
fn a_vulkan_buffer_is_not_exportable() {
    let Some(ctx) = crate::common::vulkan() else {
        return;
    };
    let a = ctx.alloc_upload(&[1.0f32; 4]).expect("upload");
    assert!(matches!(
        ctx.to_dlpack(&a, &[4], false),
        Err(Error::Unsupported { .. })
    ));
}

/// On a GPU: an export is `kDLCUDA` of the device's ordinal, and imported back into another
/// context of the device it reads the same memory (a write through the import is seen by
/// the exported array), with the handshake on the importing context's stream.
#[cfg(feature = "cuda")]
#[test]
fn a_cuda_export_imports_back() {
    let Some(ctx) = crate::common::cuda() else {
        return;
    };
    let run = || -> gpukit::Result<()> {
        let other = Context::new(DeviceSpec::Cuda(Some(ctx.device_id())))?;
        let a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 4.0])?;
        // SAFETY: the other context's default stream is a live stream of the same device.
        let raw = unsafe { other.raw_handle() };
        // SAFETY: as above.
        let t = unsafe { ctx.to_dlpack_on(&a, &[2, 2], false, raw) }?;
        let dev = t.managed().dl_tensor.device;
        assert_eq!(
            (dev.device_type, dev.device_id),
            (DL_CUDA, ctx.device_id() as i32)
        );
        // SAFETY: our own live export, consumed by the import; `a` is not used until the
        // import is dropped (which waits for its work).
        let mut imported = unsafe { other.from_dlpack::<f32>(t.into_raw()) }?;
        other.scale(2.0, imported.array_mut()?)?;
        drop(imported);
        assert_eq!(a.download()?, [2.0, 4.0, 6.0, 8.0]);
        // Pinned host memory is kDLCUDAHost, which a CPU-backend context imports as host
        // memory.
        let mut host = ctx.alloc_host::<f32>(4, gpukit::HostUse::Download)?;
        host.copy_from_slice(&[5.0, 6.0, 7.0, 8.0]);
        let t = host.into_dlpack(&[4], false).map_err(|r| r.error)?;
        assert_eq!(
            t.managed().dl_tensor.device.device_type,
            gpukit::core::dlpack::DL_CUDA_HOST
        );
        // SAFETY: our own live export, consumed by the import.
        let on_cpu = unsafe { cpu().from_dlpack::<f32>(t.into_raw()) }?;
        assert_eq!(on_cpu.array().download()?, [5.0, 6.0, 7.0, 8.0]);
        Ok(())
    };
    if let Err(e) = run() {
        panic!("{e}");
    }
}

/// Host memory not aligned to its element type (a NumPy view at an odd byte offset) is
/// refused by the import, which would alias it, and copied by `from_dlpack_copy`, which
/// reads its elements as bytes.
#[test]
fn unaligned_host_tensors_are_copied() -> gpukit::Result<()> {
    let ctx = cpu();
    let data: Vec<f32> = (0..8).map(|i| i as f32 * 1.25 - 3.0).collect();
    let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_ne_bytes()).collect();
    // Seven floats starting one byte in: the bytes 1..29 of the producer's 32.
    let expected: Vec<f32> = (0..7)
        .map(|i| f32::from_ne_bytes(bytes[1 + 4 * i..5 + 4 * i].try_into().unwrap()))
        .collect();
    let make = || {
        let (raw, deleted, _) = versioned(data.clone(), 0);
        // SAFETY: our live tensor, changed before it is handed over.
        unsafe {
            (*raw).dl_tensor.byte_offset = 1;
            (*raw).dl_tensor.shape = Box::leak(Box::new([1i64, 7])).as_mut_ptr();
        }
        (raw, deleted)
    };
    let (raw, deleted) = make();
    // SAFETY: a live tensor whose seven elements lie inside its 32 bytes.
    match unsafe { ctx.from_dlpack::<f32>(raw) } {
        Err(Error::InvalidArgument {
            arg: "data",
            message,
            ..
        }) => assert!(message.contains("not aligned"), "{message}"),
        other => panic!("expected 'not aligned', got {other:?}"),
    }
    assert_eq!(deleted.load(Ordering::SeqCst), 0);
    // SAFETY: as above; the copy consumes it.
    let (copy, shape) = unsafe { ctx.from_dlpack_copy::<f32>(raw) }?;
    assert_eq!(shape, [1, 7]);
    let got = copy.download()?;
    assert_eq!(
        got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        expected.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    assert_eq!(deleted.load(Ordering::SeqCst), 1, "given back once");
    Ok(())
}

/// The legacy form (what NumPy before 2.1 and JAX give) is copied too, strides and all, and
/// given back at once; a null pointer is refused.
#[test]
fn legacy_host_tensors_are_copied() -> gpukit::Result<()> {
    let ctx = cpu();
    let (raw, deleted, _) = legacy((0..6).map(|i| i as f32).collect());
    // SAFETY: our live tensor, changed before it is handed over: the transpose of the
    // 3 x 2 array [[0, 1], [2, 3], [4, 5]].
    unsafe {
        (*raw).dl_tensor.ndim = 2;
        (*raw).dl_tensor.shape = Box::leak(Box::new([2i64, 3])).as_mut_ptr();
        (*raw).dl_tensor.strides = Box::leak(Box::new([1i64, 2])).as_mut_ptr();
    }
    // SAFETY: a live tensor whose strides address only its six floats; the copy consumes it.
    let (copy, shape) = unsafe { ctx.from_dlpack_copy_legacy::<f32>(raw) }?;
    assert_eq!(shape, [2, 3]);
    assert_eq!(copy.download()?, [0.0, 2.0, 4.0, 1.0, 3.0, 5.0]);
    assert_eq!(deleted.load(Ordering::SeqCst), 1, "given back once");
    // SAFETY: a null pointer is refused before anything is read.
    let r = unsafe { ctx.from_dlpack_copy_legacy::<f32>(std::ptr::null_mut()) };
    assert!(
        matches!(r, Err(Error::InvalidArgument { arg: "tensor", .. })),
        "{r:?}"
    );
    Ok(())
}

/// Strided host memory (a transposed 2 x 3 view of a 3 x 2 array) is refused by the
/// import and copied, compact, by `from_dlpack_copy`, which gives the tensor back at once.
#[test]
fn strided_host_tensors_are_copied_compact() -> gpukit::Result<()> {
    let ctx = cpu();
    let make = || {
        // The producer's memory is the 3 x 2 row-major array [[0, 1], [2, 3], [4, 5]]; the
        // tensor is its transpose: shape [2, 3], strides [1, 2].
        let (raw, deleted, _) = versioned((0..6).map(|i| i as f32).collect(), 0);
        // SAFETY: our live tensor, changed before it is handed over.
        unsafe {
            (*raw).dl_tensor.shape = Box::leak(Box::new([2i64, 3])).as_mut_ptr();
            (*raw).dl_tensor.strides = Box::leak(Box::new([1i64, 2])).as_mut_ptr();
        }
        (raw, deleted)
    };
    let (raw, deleted) = make();
    // SAFETY: a live tensor whose strides address only its six floats.
    match unsafe { ctx.from_dlpack::<f32>(raw) } {
        Err(Error::InvalidArgument {
            arg: "strides",
            message,
            ..
        }) => {
            assert!(message.contains("not contiguous"), "{message}");
        }
        other => panic!("expected 'not contiguous', got {other:?}"),
    }
    assert_eq!(deleted.load(Ordering::SeqCst), 0);
    // SAFETY: as above; the copy consumes it.
    let (copy, shape) = unsafe { ctx.from_dlpack_copy::<f32>(raw) }?;
    assert_eq!(shape, [2, 3]);
    assert_eq!(copy.download()?, [0.0, 2.0, 4.0, 1.0, 3.0, 5.0]);
    assert_eq!(
        deleted.load(Ordering::SeqCst),
        1,
        "given back at once, exactly once"
    );
    // Device memory is not copied here: a CUDA tensor is refused, and stays the caller's.
    let (raw, deleted) = make();
    // SAFETY: our live tensor, changed before the call.
    unsafe { (*raw).dl_tensor.device.device_type = DL_CUDA };
    // SAFETY: the device is refused before the data is read.
    let r = unsafe { ctx.from_dlpack_copy::<f32>(raw) };
    assert!(
        matches!(r, Err(Error::InvalidArgument { arg: "device", .. })),
        "{r:?}"
    );
    assert_eq!(deleted.load(Ordering::SeqCst), 0);
    // SAFETY: still ours: delete it as its producer.
    unsafe { ((*raw).deleter.expect("a deleter"))(raw) };
    Ok(())
}

//! A byte copy in WGSL, for device copies that wgpu's copy command refuses (unaligned
//! ranges, or both in one buffer).

/// Copies `p.n` bytes from byte `p.off_in0` of `in0` to byte `p.off_out0` of `out0` (both seen as
/// words): one thread per destination word, so no two threads write one word.
pub(crate) const COPY_BYTES: &str = "struct P { n: u32, off_in0: u32, off_out0: u32, unused: u32 }
var<immediate> p: P;
@group(0) @binding(0) var<storage, read_write> in0: array<u32>;
@group(0) @binding(1) var<storage, read_write> out0: array<u32>;
fn src_byte(b: u32) -> u32 { return (in0[b / 4u] >> ((b % 4u) * 8u)) & 0xffu; }
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let first = p.off_out0 / 4u;
    let words = (p.off_out0 + p.n + 3u) / 4u - first;
    let stride = nwg.x * 256u;
    var w = gid.x;
    loop {
        if (w >= words) { break; }
        let word = first + w;
        var v = out0[word];
        for (var k = 0u; k < 4u; k++) {
            let db = word * 4u + k;
            if (db >= p.off_out0 && db < p.off_out0 + p.n) {
                let s = src_byte(p.off_in0 + (db - p.off_out0));
                v = (v & ~(0xffu << (k * 8u))) | (s << (k * 8u));
            }
        }
        out0[word] = v;
        if (words - w <= stride) { break; }
        w += stride;
    }
}
";

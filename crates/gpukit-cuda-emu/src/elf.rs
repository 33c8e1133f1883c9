//! Just enough of ELF to read a compiled object's symbol table: which runtime functions it
//! calls (does it need fibers?) and its thread-local symbols (its `__shared__` arrays, with
//! their sizes).

/// One symbol of an object's `.symtab`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Its name.
    pub name: String,
    /// `STT_*`.
    pub kind: u8,
    /// Whether it is undefined (referenced, defined elsewhere).
    pub undefined: bool,
    /// Its size in bytes.
    pub size: u64,
}

/// `STT_TLS`: a thread-local variable.
pub const STT_TLS: u8 = 6;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The symbols of a 64-bit little-endian ELF file, or `None` if it is not one or is damaged.
pub fn symbols(b: &[u8]) -> Option<Vec<Symbol>> {
    if b.get(..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
        return None;
    }
    let shoff = u64_at(b, 0x28)? as usize;
    let shentsize = u16_at(b, 0x3a)? as usize;
    let shnum = u16_at(b, 0x3c)? as usize;
    let section = |i: usize| -> Option<(u32, usize, usize, u32, usize)> {
        let at = shoff.checked_add(i.checked_mul(shentsize)?)?;
        Some((
            u32_at(b, at + 4)?,             // sh_type
            u64_at(b, at + 0x18)? as usize, // sh_offset
            u64_at(b, at + 0x20)? as usize, // sh_size
            u32_at(b, at + 0x28)?,          // sh_link
            u64_at(b, at + 0x38)? as usize, // sh_entsize
        ))
    };
    let mut out = Vec::new();
    for i in 0..shnum {
        let (kind, off, size, link, entsize) = section(i)?;
        if kind != 2 {
            continue; // SHT_SYMTAB
        }
        let (_, str_off, str_size, _, _) = section(link as usize)?;
        let strtab = b.get(str_off..str_off.checked_add(str_size)?)?;
        let entsize = if entsize == 0 { 24 } else { entsize };
        for s in 0..size / entsize {
            let at = off + s * entsize;
            let name_at = u32_at(b, at)? as usize;
            let info = *b.get(at + 4)?;
            let shndx = u16_at(b, at + 6)?;
            let sym_size = u64_at(b, at + 16)?;
            let name_bytes = strtab.get(name_at..)?;
            let end = name_bytes.iter().position(|&c| c == 0)?;
            let name = String::from_utf8_lossy(&name_bytes[..end]).into_owned();
            if name.is_empty() {
                continue;
            }
            out.push(Symbol {
                name,
                kind: info & 0xf,
                undefined: shndx == 0,
                size: sym_size,
            });
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_not_an_object() {
        assert!(symbols(b"not an ELF file").is_none());
        assert!(symbols(b"\x7fELF\x02\x01").is_none());
    }

    /// The test binary itself is an ELF file with a symbol table (where it was not stripped).
    #[test]
    fn reads_a_real_symbol_table() {
        let Ok(exe) = std::env::current_exe().and_then(std::fs::read) else {
            return;
        };
        if let Some(syms) = symbols(&exe) {
            assert!(
                syms.iter().any(|s| !s.undefined && s.size > 0),
                "{}",
                syms.len()
            );
        }
    }
}

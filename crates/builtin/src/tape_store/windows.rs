//! Reading a tape file from its end: the windows a read from an id or an
//! append's last id looks in, growing until the line sought is in one.

use super::parsed::Stored;

/// How far from a tape's end the store looks for a line (see
/// [`tail_windows`]): a read from an id, when the tape is not kept parsed,
/// for the lines since the agent's last step or turn; an append for the
/// last id. Further back, parsing the whole tape (and keeping it) is as
/// cheap.
pub(super) const TAIL_WINDOW: u64 = 64 * 1024;
/// The first window [`tail_windows`] reads, four times larger each time
/// the line is not in it, up to [`TAIL_WINDOW`]: the line sought is nearly
/// always among the last few (one turn's entries), and reading and
/// copying 64 KiB each time showed in the profiles of long sessions.
pub(super) const TAIL_FIRST_WINDOW: u64 = 4 * 1024;

/// `len` bytes of `file` from `offset`, read into a buffer that is not
/// zeroed first (a long tape's first read wrote its whole length of
/// zeroes, then the file over them).
pub(super) fn read_exact_from(file: &std::fs::File, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek};
    let mut file = file;
    file.seek(std::io::SeekFrom::Start(offset))?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(len).read_to_end(&mut bytes)?;
    #[cfg(test)]
    super::tests::READ.with(|read| read.set(read.get() + bytes.len() as u64));
    if (bytes.len() as u64) < len {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file got shorter while it was read"));
    }
    Ok(bytes)
}

/// Where the first whole line of `window` (a file's bytes from offset
/// `from` on) starts: a window that does not start the file may begin
/// inside a line, so only what follows its first newline counts (nothing,
/// when it holds none).
pub(super) fn first_whole_line(window: &[u8], from: u64) -> usize {
    match from {
        0 => 0,
        _ => memchr::memchr(b'\n', window).map_or(window.len(), |i| i + 1),
    }
}

/// Where the lines after `after_id` start in `file` (of `len` bytes): just
/// past the last complete line that reads as an entry with that id or
/// less, found from the end within the last [`TAIL_WINDOW`] bytes; 0 (a
/// whole read) when none does there. A whole read starts its answer at the
/// same place (`select` starts after the last entry with such an id), so
/// both answer the same entries, whatever the ids' order.
pub(super) fn tail_start(file: &std::fs::File, len: u64, after_id: u64) -> std::io::Result<u64> {
    for window in tail_windows(file, len) {
        let (from, bytes) = window?;
        // Complete lines only.
        let complete = memchr::memrchr(b'\n', &bytes).map_or(0, |i| i + 1);
        let first = first_whole_line(&bytes, from);
        let mut end = complete;
        while end > first {
            let start = memchr::memrchr(b'\n', &bytes[first..end - 1]).map_or(first, |i| first + i + 1);
            if Stored::parse(&bytes[start..end - 1]).is_ok_and(|e| e.id <= after_id) {
                return Ok(from + end as u64);
            }
            end = start;
        }
    }
    Ok(0)
}

/// The bytes of a file of `len` bytes from offset `from` to its end, for
/// growing windows: its last [`TAIL_FIRST_WINDOW`] bytes, four times as
/// many each time up to [`TAIL_WINDOW`], none after one that starts the
/// file. A reader looking for the last line that matches, from the end,
/// stops at the first window holding one: a smaller window holds the same
/// whole lines as the end of a larger one, in the same order, so it finds
/// what reading the largest at once would.
pub(super) fn tail_windows(
    file: &std::fs::File,
    len: u64,
) -> impl Iterator<Item = std::io::Result<(u64, Vec<u8>)>> + '_ {
    let mut next = Some(TAIL_FIRST_WINDOW.min(TAIL_WINDOW));
    std::iter::from_fn(move || {
        let window = next?;
        let from = len.saturating_sub(window);
        next = (from > 0 && window < TAIL_WINDOW).then(|| (window * 4).min(TAIL_WINDOW));
        Some(read_exact_from(file, from, len - from).map(|bytes| (from, bytes)))
    })
}

#[derive(serde::Deserialize)]
pub(super) struct IdOnly {
    pub(super) id: u64,
}

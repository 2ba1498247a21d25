//! Where a NEFF's bytes come from: `nrt_load`'s buffer or a file, read from any offset as often
//! as the reader needs (a second inflate pass, the rest of the digest after a refusal), and
//! never past the end the source had when it was opened.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Buffer of a file reader: large enough that the inflater asks the kernel rarely, small
/// enough to stay in cache.
const FILE_BUFFER: usize = 256 << 10;

/// A NEFF's bytes, re-readable from any offset.
pub trait Source {
    /// Bytes the source holds. A path that is not a regular file holds 0: the size-floor gate
    /// refuses it before a byte is read.
    fn len(&self) -> u64;

    /// Whether [`Source::len`] is 0.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A buffered reader of bytes `[offset, offset + len)`, clamped to [`Source::len`].
    fn open_at(&self, offset: u64, len: u64) -> io::Result<Box<dyn BufRead + '_>>;

    /// What the source is, for messages: `None` for a regular file or a buffer, else why it
    /// holds no bytes ("a character device, not a regular file").
    fn not_regular(&self) -> Option<&str> {
        None
    }
}

impl Source for &[u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn open_at(&self, offset: u64, len: u64) -> io::Result<Box<dyn BufRead + '_>> {
        let n = <[u8]>::len(self);
        let start = usize::try_from(offset).map_or(n, |o| o.min(n));
        let end = usize::try_from(len).map_or(n, |l| start.saturating_add(l).min(n));
        Ok(Box::new(&self[start..end]))
    }
}

/// A NEFF file, opened without blocking (a FIFO never stalls the open) and sized from the
/// open descriptor: a directory, a device, a FIFO or a socket holds no bytes and is never read.
#[derive(Debug)]
pub struct NeffFile {
    file: Option<File>,
    len: u64,
    path: PathBuf,
    kind: Option<String>,
}

impl NeffFile {
    /// Opens `path` read-only (`O_NONBLOCK`, so a FIFO does not wait for a writer) and takes its
    /// size from `fstat` of the open descriptor.
    pub fn open(path: impl AsRef<Path>) -> io::Result<NeffFile> {
        let path = path.as_ref();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?;
        let meta = file.metadata()?;
        let ty = meta.file_type();
        if ty.is_file() {
            return Ok(NeffFile {
                len: meta.len(),
                file: Some(file),
                path: path.to_path_buf(),
                kind: None,
            });
        }
        let what = if ty.is_dir() {
            "a directory"
        } else if ty.is_char_device() {
            "a character device"
        } else if ty.is_block_device() {
            "a block device"
        } else if ty.is_fifo() {
            "a FIFO"
        } else if ty.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        Ok(NeffFile {
            file: None,
            len: 0,
            path: path.to_path_buf(),
            kind: Some(format!("{} is {what}, not a regular file", path.display())),
        })
    }

    /// The path it was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the whole file when it holds at most `cap` bytes (a manifest); `None` when larger.
    pub fn read_all_capped(&self, cap: u64) -> io::Result<Option<Vec<u8>>> {
        if self.len > cap {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(usize::try_from(self.len).unwrap_or(0));
        self.open_at(0, self.len)?.read_to_end(&mut out)?;
        Ok(Some(out))
    }
}

/// `pread` from `[pos, end)` of a file: readers of one file never share a seek position.
struct At<'f> {
    file: &'f File,
    pos: u64,
    end: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = usize::try_from(self.end - self.pos).unwrap_or(usize::MAX);
        let want = buf.len().min(left);
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Source for NeffFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn open_at(&self, offset: u64, len: u64) -> io::Result<Box<dyn BufRead + '_>> {
        let Some(file) = &self.file else {
            return Ok(Box::new(io::empty()));
        };
        let pos = offset.min(self.len);
        let end = pos.saturating_add(len).min(self.len);
        Ok(Box::new(BufReader::with_capacity(
            FILE_BUFFER,
            At { file, pos, end },
        )))
    }

    fn not_regular(&self) -> Option<&str> {
        self.kind.as_deref()
    }
}

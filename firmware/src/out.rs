//! Formatted output without a heap: `core::fmt::Write` into a fixed stack buffer, flushed to a
//! file descriptor with `write(2)` when full and on drop.

use core::fmt;

use crate::rt;

/// A buffered writer to `fd` with `N` bytes of buffer.
pub struct Out<const N: usize> {
    fd: i32,
    len: usize,
    buf: [u8; N],
}

impl<const N: usize> Out<N> {
    /// A writer to `fd` (1 = stdout, 2 = stderr).
    pub const fn new(fd: i32) -> Self {
        Out {
            fd,
            len: 0,
            buf: [0; N],
        }
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) {
        rt::write_all(self.fd, &self.buf[..self.len]);
        self.len = 0;
    }
}

impl<const N: usize> fmt::Write for Out<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut b = s.as_bytes();
        while !b.is_empty() {
            if self.len == N {
                self.flush();
            }
            let n = b.len().min(N - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
            self.len += n;
            b = &b[n..];
        }
        Ok(())
    }
}

impl<const N: usize> Drop for Out<N> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Bytes shown as MiB with one decimal, in integer arithmetic.
#[derive(Copy, Clone)]
pub struct Mib(pub u64);

impl fmt::Display for Mib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tenths = (self.0 as u128 * 10 + (1 << 19)) >> 20;
        write!(f, "{}.{} MiB", tenths / 10, tenths % 10)
    }
}

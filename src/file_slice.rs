//! A byte range of an open file, handed from the storage engine to the network without a
//! copy: the Fetch path sends it with sendfile(2) (`server`), replay and tests read it into a
//! buffer. It holds the file open, so it stays valid after its segment is deleted (an unlinked
//! file lives on while open); a truncation under it shortens what it yields, never faults.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// A byte range of a segment file, ready to be copied to a socket or a buffer.
#[derive(Debug, Clone)]
pub struct FileSlice {
    file: Arc<File>,
    pub position: u64,
    pub len: u64,
}

impl FileSlice {
    pub fn new(file: Arc<File>, position: u64, len: u64) -> FileSlice {
        FileSlice {
            file,
            position,
            len,
        }
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Appends the slice's bytes to `out`. If the log was truncated under the slice, only the
    /// bytes still present are copied (clients treat a partial trailing batch as the end).
    pub fn read_into(&self, out: &mut Vec<u8>) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(self.len).map_err(io::Error::other)?;
        out.reserve(len);
        let start = out.len();
        let mut done = 0;
        // Read straight into the spare capacity: no zero-filling of a buffer about to be
        // overwritten (this is the Fetch path; every byte served passes here).
        while done < len {
            let spare = &mut out.spare_capacity_mut()[done..len];
            let offset = i64::try_from(self.position + done as u64).map_err(io::Error::other)?;
            // SAFETY: pread writes at most `spare.len()` bytes into memory `out` owns.
            let n = unsafe {
                libc::pread(
                    self.file.as_raw_fd(),
                    spare.as_mut_ptr().cast(),
                    spare.len(),
                    offset,
                )
            };
            match n {
                0 => break,
                n if n > 0 => done += n as usize,
                _ => {
                    let error = io::Error::last_os_error();
                    if error.kind() != io::ErrorKind::Interrupted {
                        return Err(error);
                    }
                }
            }
        }
        // SAFETY: pread initialized the `done` bytes after `start`.
        unsafe { out.set_len(start + done) };
        Ok(())
    }

    /// Copies the slice into the front of `out` (which must hold `len` bytes, so a reused
    /// buffer needs no clearing); returns the bytes copied, fewer if the log was truncated.
    pub fn read_to_slice(&self, out: &mut [u8]) -> io::Result<usize> {
        let len = usize::try_from(self.len).map_err(io::Error::other)?;
        if out.len() < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "buffer smaller than the slice",
            ));
        }
        let mut done = 0;
        while done < len {
            match self
                .file
                .read_at(&mut out[done..len], self.position + done as u64)
            {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    pub fn to_vec(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.read_into(&mut out)?;
        Ok(out)
    }
}

//! Kafka's record compression codecs (none, gzip, snappy, lz4, zstd) over a batch's records
//! section, with a bound on what decompression may produce (a compressed batch cannot inflate
//! into unbounded memory). The leader decompresses to validate records; the replica layer
//! recompresses for a topic's `compression.type`.

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy, Zstd};

/// Kafka's codec ids (the low three bits of a batch's attributes).
pub const CODEC_MASK: i16 = 0x07;
/// The most a batch may grow to when decompressed: a bound against compression bombs.
pub const DECOMPRESSED_BYTES_MAX: usize = 64 << 20;

/// The records section of a batch in `codec`, decompressed (at most
/// [`DECOMPRESSED_BYTES_MAX`] bytes).
pub fn decompress(codec: i16, input: Bytes) -> anyhow::Result<Bytes> {
    fn take(b: &mut Bytes) -> anyhow::Result<Bytes> {
        if b.remaining() > DECOMPRESSED_BYTES_MAX {
            anyhow::bail!("decompressed records exceed {DECOMPRESSED_BYTES_MAX} bytes");
        }
        Ok(b.copy_to_bytes(b.remaining()))
    }
    let mut input = input;
    match codec {
        0 => Ok(input),
        1 => Gzip::decompress(&mut input, take),
        2 => Snappy::decompress(&mut input, take),
        3 => Lz4::decompress(&mut input, take),
        4 => Zstd::decompress(&mut input, take),
        other => anyhow::bail!("unknown compression codec {other}"),
    }
}

/// `records` compressed with `codec`, appended to `out`.
pub fn compress(codec: i16, records: &[u8], out: &mut BytesMut) -> anyhow::Result<()> {
    let fill = |b: &mut BytesMut| -> anyhow::Result<()> {
        b.extend_from_slice(records);
        Ok(())
    };
    match codec {
        0 => {
            out.extend_from_slice(records);
            Ok(())
        }
        1 => Gzip::compress(out, fill),
        2 => Snappy::compress(out, fill),
        3 => Lz4::compress(out, fill),
        4 => Zstd::compress(out, fill),
        other => anyhow::bail!("unknown compression codec {other}"),
    }
}

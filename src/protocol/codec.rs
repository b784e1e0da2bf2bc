//! Kafka's record compression codecs (none, gzip, snappy, lz4, zstd) over a batch's records
//! section, with a bound on what decompression may produce (a compressed batch cannot inflate
//! into unbounded memory). The leader decompresses to validate records; the replica layer
//! recompresses for a topic's `compression.type`.

use std::io::Read;

use bytes::BytesMut;
use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};

/// Kafka's codec ids (the low three bits of a batch's attributes).
pub const CODEC_MASK: i16 = 0x07;
/// The most a batch may grow to when decompressed: a bound against compression bombs.
pub const DECOMPRESSED_BYTES_MAX: usize = 64 << 20;

/// The records section of a batch in `codec`, decompressed, refused past
/// [`DECOMPRESSED_BYTES_MAX`] bytes: streams are read through a limit, and snappy's stated
/// lengths are checked before anything is allocated for them. (The codec crate's own
/// decompressors inflate everything first.)
pub fn decompress(codec: i16, section: &[u8]) -> Result<Vec<u8>, String> {
    match codec {
        0 => bounded(section),
        1 => bounded(flate2::read::GzDecoder::new(section)),
        2 => snappy(section),
        3 => bounded(lz4::Decoder::new(section).map_err(|e| e.to_string())?),
        4 => bounded(zstd::stream::read::Decoder::new(section).map_err(|e| e.to_string())?),
        other => Err(format!("unknown compression codec {other}")),
    }
}

fn too_large() -> String {
    format!("decompressed records exceed {DECOMPRESSED_BYTES_MAX} bytes")
}

/// Everything `reader` yields, or an error once it passes the bound.
fn bounded(reader: impl Read) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let limit = DECOMPRESSED_BYTES_MAX as u64 + 1;
    reader
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    if out.len() > DECOMPRESSED_BYTES_MAX {
        return Err(too_large());
    }
    Ok(out)
}

/// Kafka's snappy: xerial's framing (a magic header, then blocks each prefixed by its 32-bit
/// length), or one raw block as the Java client falls back to.
fn snappy(section: &[u8]) -> Result<Vec<u8>, String> {
    const MAGIC: &[u8] = b"\x82SNAPPY\x00";
    const HEADER_BYTES: usize = 16;
    let mut decoder = snap::raw::Decoder::new();
    let mut block = |compressed: &[u8], out: &mut Vec<u8>| -> Result<(), String> {
        let len = snap::raw::decompress_len(compressed).map_err(|e| e.to_string())?;
        if out.len() + len > DECOMPRESSED_BYTES_MAX {
            return Err(too_large());
        }
        let start = out.len();
        out.resize(start + len, 0);
        let written = decoder
            .decompress(compressed, &mut out[start..])
            .map_err(|e| e.to_string())?;
        out.truncate(start + written);
        Ok(())
    };
    let mut out = Vec::new();
    if !section.starts_with(MAGIC) {
        block(section, &mut out)?;
        return Ok(out);
    }
    let mut rest = section
        .get(HEADER_BYTES..)
        .ok_or("truncated snappy header")?;
    while !rest.is_empty() {
        let (len, tail) = rest
            .split_first_chunk::<4>()
            .ok_or("truncated snappy block length")?;
        let len = u32::from_be_bytes(*len) as usize;
        let compressed = tail
            .get(..len)
            .ok_or("snappy block longer than the batch")?;
        block(compressed, &mut out)?;
        rest = &tail[len..];
    }
    Ok(out)
}

/// `records` compressed with `codec`, appended to `out`.
pub fn compress(codec: i16, records: &[u8], out: &mut BytesMut) -> Result<(), String> {
    let fill = |b: &mut BytesMut| {
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
        other => return Err(format!("unknown compression codec {other}")),
    }
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_round_trips_and_bombs_are_refused() {
        let plain: Vec<u8> = (0..100_000u32)
            .flat_map(|n| (n % 251).to_be_bytes())
            .collect();
        // Zeros compress about a thousandfold: past the bound once decompressed.
        let bomb = vec![0u8; DECOMPRESSED_BYTES_MAX + 1];
        for codec in 0..=4 {
            let mut compressed = BytesMut::new();
            compress(codec, &plain, &mut compressed).expect("compress");
            assert_eq!(
                decompress(codec, &compressed),
                Ok(plain.clone()),
                "codec {codec}"
            );
            if codec == 0 {
                continue;
            }
            let mut compressed = BytesMut::new();
            compress(codec, &bomb, &mut compressed).expect("compress");
            assert!(
                compressed.len() < 4 << 20,
                "codec {codec}: {} bytes",
                compressed.len()
            );
            assert_eq!(
                decompress(codec, &compressed),
                Err(too_large()),
                "codec {codec}"
            );
        }
    }

    #[test]
    fn a_snappy_block_claiming_gigabytes_allocates_nothing() {
        // A raw block whose varint length header says 4 GiB - 1.
        let lying = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert!(decompress(2, &lying).is_err());
    }
}

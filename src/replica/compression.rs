//! The topic's `compression.type`: batches are stored as producers compressed them, unless the
//! topic names a codec, in which case a batch in another codec is recompressed before it is
//! appended. Only the records section changes codec: records, headers (duplicates included),
//! producer fields and timestamps stay byte for byte.

use bytes::BytesMut;

use crate::log::LogError;
use crate::log::batch::{BATCH_HEADER_BYTES, BatchHeader, BatchIter, compute_crc};
use crate::protocol::codec::{CODEC_MASK, compress, decompress};

/// A topic's `compression.type`, parsed: `None` keeps the producer's codec.
pub fn target_codec(compression_type: &str) -> Option<i16> {
    match compression_type {
        "uncompressed" | "none" => Some(0),
        "gzip" => Some(1),
        "snappy" => Some(2),
        "lz4" => Some(3),
        "zstd" => Some(4),
        _ => None,
    }
}

fn invalid(position: usize, reason: impl Into<String>) -> LogError {
    LogError::Corrupt {
        position,
        reason: reason.into(),
    }
}

/// Rewrites every batch not already in `codec`. `None` when nothing needed rewriting. A batch
/// whose CRC fails is refused here (its records must not be trusted to recompress).
pub fn recompress(records: &[u8], codec: i16) -> Result<Option<Vec<u8>>, LogError> {
    let mut needed = false;
    for item in BatchIter::new(records) {
        let (_, header, _) = item?;
        if header.attributes & CODEC_MASK != codec && !header.is_control() {
            needed = true;
        }
    }
    if !needed {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(records.len());
    for item in BatchIter::new(records) {
        let (position, header, batch) = item?;
        if header.attributes & CODEC_MASK == codec || header.is_control() {
            out.extend_from_slice(batch);
            continue;
        }
        if compute_crc(batch) != header.crc {
            return Err(invalid(position, "CRC mismatch"));
        }
        rewrite(position, &header, batch, codec, &mut out)?;
    }
    Ok(Some(out))
}

fn rewrite(
    position: usize,
    header: &BatchHeader,
    batch: &[u8],
    codec: i16,
    out: &mut Vec<u8>,
) -> Result<(), LogError> {
    let plain = decompress(header.attributes & CODEC_MASK, &batch[BATCH_HEADER_BYTES..])
        .map_err(|e| invalid(position, format!("records do not decompress: {e}")))?;
    let mut compressed = BytesMut::with_capacity(plain.len() / 2 + 64);
    compress(codec, &plain, &mut compressed)
        .map_err(|e| invalid(position, format!("records do not compress: {e}")))?;
    let start = out.len();
    out.extend_from_slice(&batch[..BATCH_HEADER_BYTES]);
    out.extend_from_slice(&compressed);
    let written = &mut out[start..];
    // batch_length counts from the partition leader epoch (byte 12) on.
    let batch_length = i32::try_from(written.len() - 12)
        .map_err(|_| invalid(position, "recompressed batch too large"))?;
    written[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let attributes = (header.attributes & !CODEC_MASK) | codec;
    written[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = compute_crc(written);
    written[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::{BatchBuilder, RecordIter, validate_batch};

    type KeyValue = (Option<Vec<u8>>, Option<Vec<u8>>);

    fn records_of(batch: &[u8]) -> Vec<KeyValue> {
        let header = BatchHeader::parse(batch).expect("header");
        assert_eq!(header.attributes & CODEC_MASK, 0);
        RecordIter::new(&header, batch)
            .map(|r| {
                let r = r.expect("record");
                (r.key.map(<[u8]>::to_vec), r.value.map(<[u8]>::to_vec))
            })
            .collect()
    }

    #[test]
    fn every_codec_round_trips_records_and_headers_byte_for_byte() {
        let mut builder = BatchBuilder::new(0, 1000).producer(42, 3, 17);
        for i in 0..50u8 {
            builder.push(
                1000 + i64::from(i),
                Some(&[i]),
                Some(&[i; 100]),
                &[(b"h", Some(b"1")), (b"h", Some(b"2"))],
            );
        }
        let original = builder.build();
        for codec in 1..=4 {
            let compressed = recompress(&original, codec)
                .expect("compress")
                .expect("changed");
            let header = BatchHeader::parse(&compressed).expect("header");
            assert_eq!(header.attributes & CODEC_MASK, codec);
            assert_eq!(
                (
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence
                ),
                (42, 3, 17)
            );
            validate_batch(0, &header, &compressed).expect("valid batch");
            assert!(
                compressed.len() < original.len(),
                "codec {codec} did not shrink"
            );
            let back = recompress(&compressed, 0)
                .expect("decompress")
                .expect("changed");
            assert_eq!(back, original, "codec {codec} did not round-trip");
            assert_eq!(records_of(&back).len(), 50);
        }
        assert!(recompress(&original, 0).expect("same").is_none());
    }

    #[test]
    fn a_batch_with_a_bad_crc_is_refused() {
        let mut builder = BatchBuilder::new(0, 1000);
        builder.push(1000, None, Some(b"v"), &[]);
        let mut batch = builder.build();
        let last = batch.len() - 1;
        batch[last] ^= 1;
        assert!(matches!(
            recompress(&batch, 1),
            Err(LogError::Corrupt { .. })
        ));
    }
}

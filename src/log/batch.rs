//! Validation of producers' v2 record batches, as Kafka's broker does before appending (the
//! batch format itself, views and builder, is `protocol::batch`, shared with the client SDK).

pub use crate::protocol::batch::*;

use super::error::{LogError, Result};

impl From<BatchError> for LogError {
    fn from(error: BatchError) -> Self {
        LogError::Corrupt {
            position: error.position,
            reason: error.reason,
        }
    }
}

/// Checks one framed batch the way Kafka's broker does before it appends a producer's batch:
/// magic, CRC, count against offsets, and for uncompressed batches every record's framing.
/// Returns the largest record timestamp of an uncompressed batch (Kafka rewrites the header's
/// max timestamp from the records rather than trusting the producer).
pub fn validate_batch(position: usize, header: &BatchHeader, batch: &[u8]) -> Result<Option<i64>> {
    let invalid = |reason: String| LogError::InvalidRecord { position, reason };
    if header.magic != MAGIC_V2 {
        return Err(if (0..MAGIC_V2).contains(&header.magic) {
            invalid(format!(
                "magic {} is not supported, only v2 batches",
                header.magic
            ))
        } else {
            LogError::Corrupt {
                position,
                reason: format!("invalid magic {}", header.magic),
            }
        });
    }
    let crc = compute_crc(batch);
    if crc != header.crc {
        return Err(LogError::Corrupt {
            position,
            reason: format!("CRC-32C is {crc:#010x}, header says {:#010x}", header.crc),
        });
    }
    if header.records_count <= 0 || header.last_offset_delta != header.records_count - 1 {
        return Err(invalid(format!(
            "records count {} does not match last offset delta {}",
            header.records_count, header.last_offset_delta
        )));
    }
    if header.is_compressed() {
        return Ok(None);
    }
    check_section(
        position,
        header,
        &batch[BATCH_HEADER_BYTES.min(batch.len())..],
    )
    .map(Some)
}

/// [`check_records`] over a records section (an uncompressed batch's, or a compressed one's
/// decompressed): one pass with [`scan_records`], and the record walk only when that finds
/// something wrong, to say what.
pub fn check_section(position: usize, header: &BatchHeader, section: &[u8]) -> Result<i64> {
    match scan_records(header, section) {
        Some(max_timestamp) => Ok(max_timestamp),
        None => check_records(position, header, RecordIter::decompressed(header, section)),
    }
}

/// Every record's framing, offset deltas in order from 0 and the count against the header;
/// the largest record timestamp. For an uncompressed batch's records or a compressed batch's,
/// decompressed.
pub fn check_records(
    position: usize,
    header: &BatchHeader,
    records: RecordIter<'_>,
) -> Result<i64> {
    let invalid = |reason: String| LogError::InvalidRecord { position, reason };
    let mut max_timestamp = i64::MIN;
    let mut expected_delta = 0i32;
    for record in records {
        let record = record.map_err(|reason| invalid(reason.to_string()))?;
        max_timestamp = max_timestamp.max(record.timestamp(header));
        if record.offset_delta != expected_delta {
            return Err(invalid(format!(
                "record offset delta {} where {} was expected",
                record.offset_delta, expected_delta
            )));
        }
        expected_delta += 1;
    }
    if expected_delta != header.records_count {
        return Err(invalid(format!(
            "batch holds {expected_delta} records, header says {}",
            header.records_count
        )));
    }
    Ok(max_timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut builder = BatchBuilder::new(0, 1_000);
        builder.push(1_000, Some(b"k1"), Some(b"v1"), &[(b"h", Some(b"x"))]);
        builder.push(1_005, None, Some(b"v2"), &[]);
        builder.push(999, Some(b"k3"), None, &[]);
        builder.build()
    }

    #[test]
    fn builder_output_parses_and_validates() {
        let batch = sample();
        let header = BatchHeader::parse(&batch).unwrap();
        assert_eq!(header.total_size(), Some(batch.len()));
        assert_eq!(header.records_count, 3);
        assert_eq!(header.last_offset_delta, 2);
        assert_eq!(header.max_timestamp, 1_005);
        validate_batch(0, &header, &batch).unwrap();
        let records: Vec<_> = RecordIter::new(&header, &batch)
            .map(Result::unwrap)
            .collect();
        assert_eq!(records[0].key, Some(&b"k1"[..]));
        assert_eq!(records[0].header_count, 1);
        assert_eq!(records[1].key, None);
        assert_eq!(records[2].value, None);
        assert_eq!(records[2].timestamp(&header), 999);
    }

    #[test]
    fn varints_round_trip_at_the_edges() {
        for value in [0, 1, -1, 63, -64, 64, i32::MAX, i32::MIN] {
            let mut out = Vec::new();
            write_varint(&mut out, value);
            let mut input = &out[..];
            assert_eq!(read_varint(&mut input), Some(value));
            assert!(input.is_empty());
        }
        for value in [0, -1, i64::MAX, i64::MIN, 1 << 40] {
            let mut out = Vec::new();
            write_varlong(&mut out, value);
            let mut input = &out[..];
            assert_eq!(read_varlong(&mut input), Some(value));
        }
        // Eleven continuation bytes never end a varlong.
        let mut input = &[0xffu8; 11][..];
        assert_eq!(read_varlong(&mut input), None);
    }

    #[test]
    fn offsets_and_epoch_are_outside_the_crc() {
        let mut batch = sample();
        set_base_offset_and_epoch(&mut batch, 77, 5);
        let header = BatchHeader::parse(&batch).unwrap();
        assert_eq!((header.base_offset, header.partition_leader_epoch), (77, 5));
        validate_batch(0, &header, &batch).unwrap();
    }

    #[test]
    fn log_append_time_rechecksums() {
        let mut batch = sample();
        set_log_append_time(&mut batch, 42);
        let header = BatchHeader::parse(&batch).unwrap();
        assert!(header.is_log_append_time());
        assert_eq!(header.max_timestamp, 42);
        validate_batch(0, &header, &batch).unwrap();
    }

    #[test]
    fn every_validation_error_has_its_kafka_code() {
        use crate::protocol::errors::KafkaError;
        let check = |batch: &[u8], expected: KafkaError| {
            let error = match BatchIter::new(batch).next().unwrap() {
                Err(error) => LogError::from(error),
                Ok((position, header, bytes)) => {
                    validate_batch(position, &header, bytes).unwrap_err()
                }
            };
            assert_eq!(error.kafka_error(), expected, "{error}");
        };
        let good = sample();
        // Truncated header, lying length, bad CRC.
        check(&good[..40], KafkaError::CorruptMessage);
        let mut lying = good.clone();
        lying[8..12].copy_from_slice(&10_000i32.to_be_bytes());
        check(&lying, KafkaError::CorruptMessage);
        let mut negative = good.clone();
        negative[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        check(&negative, KafkaError::CorruptMessage);
        let mut flipped = good.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        check(&flipped, KafkaError::CorruptMessage);
        // Old magic, count not matching offsets, record framing: INVALID_RECORD.
        let mut old_magic = good.clone();
        old_magic[16] = 1;
        check(&old_magic, KafkaError::InvalidRecord);
        let rechecksum = |mut batch: Vec<u8>| {
            let crc = compute_crc(&batch);
            batch[17..21].copy_from_slice(&crc.to_be_bytes());
            batch
        };
        let mut count = good.clone();
        count[57..61].copy_from_slice(&5i32.to_be_bytes());
        check(&rechecksum(count), KafkaError::InvalidRecord);
        let mut delta = good.clone();
        delta[23..27].copy_from_slice(&7i32.to_be_bytes());
        check(&rechecksum(delta), KafkaError::InvalidRecord);
        let mut record_length = good.clone();
        record_length[61] = 0x7e; // first record claims 63 bytes
        check(&rechecksum(record_length), KafkaError::InvalidRecord);
    }

    /// The one-pass scan the produce path runs agrees with the record walk it replaces, on
    /// valid batches and on batches with bytes flipped, cut or inserted in their records:
    /// whatever the walk refuses the scan refuses, and the same largest timestamp otherwise.
    #[test]
    fn the_record_scan_agrees_with_the_record_walk() {
        let seed = std::env::var("SLUICE_TEST_SEED")
            .ok()
            .and_then(|seed| seed.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("record scan test: seed {seed} (replay with SLUICE_TEST_SEED={seed})");
        let mut rng = super::super::tests::Rng::new(seed);
        let mut refused = 0;
        for round in 0..3_000 {
            let mut builder = BatchBuilder::new(0, 1_000);
            let count = 1 + rng.below(6);
            for n in 0..count {
                let key = rng.chance(50).then(|| vec![b'k'; rng.below(200) as usize]);
                let value = rng.chance(90).then(|| vec![b'v'; rng.below(300) as usize]);
                let header_value = vec![b'h'; rng.below(3) as usize];
                let headers: Vec<(&[u8], Option<&[u8]>)> = (0..rng.below(3))
                    .map(|_| (&b"hk"[..], rng.chance(70).then_some(&header_value[..])))
                    .collect();
                let delta = rng.below(1 << 20) as i64 - (1 << 19);
                builder.push(
                    1_000 + delta + n as i64,
                    key.as_deref(),
                    value.as_deref(),
                    &headers,
                );
            }
            let mut batch = builder.build();
            let damage = rng.below(4);
            for _ in 0..damage {
                let at = BATCH_HEADER_BYTES
                    + rng.below((batch.len() - BATCH_HEADER_BYTES) as u64) as usize;
                match rng.below(3) {
                    0 => batch[at] = rng.next_u64() as u8,
                    1 => {
                        batch.remove(at);
                    }
                    _ => batch.insert(at, rng.next_u64() as u8),
                }
            }
            let header = BatchHeader::parse(&batch).unwrap();
            let walked = check_records(0, &header, RecordIter::new(&header, &batch)).ok();
            let scanned = scan_records(&header, &batch[BATCH_HEADER_BYTES..]);
            assert_eq!(scanned, walked, "seed {seed} round {round}: {batch:?}");
            refused += usize::from(walked.is_none());
        }
        assert!(
            refused > 100,
            "seed {seed}: only {refused} damaged batches refused"
        );
    }
}

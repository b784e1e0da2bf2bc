//! Connection quotas, as Kafka's `ConnectionQuotas` keeps them: `max.connections.per.ip` (with
//! `max.connections.per.ip.overrides`) counted across every listener of the broker, a
//! connection over it closed at once; and `max.connection.creation.rate` (broker-wide, or per
//! listener with `listener.name.<l>.max.connection.creation.rate`), which slows accepting down
//! rather than refusing: a burst of new connections waits its turn.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connections open per client address, across the broker's listeners.
#[derive(Debug)]
pub struct PerIpConnections {
    default_max: usize,
    overrides: HashMap<IpAddr, usize>,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl PerIpConnections {
    pub fn new(default_max: usize, overrides: HashMap<IpAddr, usize>) -> Self {
        PerIpConnections {
            default_max,
            overrides,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// The most connections `ip` may hold.
    pub fn max_for(&self, ip: IpAddr) -> usize {
        self.overrides
            .get(&ip.to_canonical())
            .copied()
            .unwrap_or(self.default_max)
    }

    /// Counts a new connection from `ip`, or `Err(max)` when it already holds its maximum.
    /// The count is released when the returned guard drops.
    pub fn open(self: &Arc<Self>, ip: IpAddr) -> Result<IpConnection, usize> {
        let ip = ip.to_canonical();
        let max = self.max_for(ip);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(ip).or_default();
        if *count >= max {
            if *count == 0 {
                open.remove(&ip);
            }
            return Err(max);
        }
        *count += 1;
        Ok(IpConnection {
            quotas: Arc::clone(self),
            ip,
        })
    }

    fn close(&self, ip: IpAddr) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&ip);
            }
        }
    }
}

/// One counted connection; releases its count when dropped.
#[derive(Debug)]
pub struct IpConnection {
    quotas: Arc<PerIpConnections>,
    ip: IpAddr,
}

impl Drop for IpConnection {
    fn drop(&mut self) {
        self.quotas.close(self.ip);
    }
}

/// Parses `max.connections.per.ip.overrides`: `host:count` entries separated by commas, each
/// host an IP address (Kafka also resolves host names; Sluice takes addresses only, so that an
/// override never depends on DNS at start).
pub fn parse_overrides(text: &str) -> Result<HashMap<IpAddr, usize>, String> {
    let mut overrides = HashMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (host, count) = entry
            .rsplit_once(':')
            .ok_or_else(|| format!("'{entry}' is not host:count"))?;
        let host = host.trim().trim_start_matches('[').trim_end_matches(']');
        let ip: IpAddr = host
            .parse()
            .map_err(|_| format!("'{host}' is not an IP address (host names are not resolved)"))?;
        let count: usize = count
            .trim()
            .parse()
            .map_err(|_| format!("'{count}' is not a connection count"))?;
        overrides.insert(ip.to_canonical(), count);
    }
    Ok(overrides)
}

/// A creation rate: at most `rate` new connections a second, in bursts of up to `rate`.
#[derive(Debug)]
pub struct CreationRate {
    rate: f64,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
}

impl CreationRate {
    /// `None` when unlimited.
    pub fn new(rate_per_second: u64) -> Option<Self> {
        (rate_per_second < i32::MAX as u64 && rate_per_second > 0).then(|| CreationRate {
            rate: rate_per_second as f64,
            state: Mutex::new(Bucket {
                tokens: rate_per_second as f64,
                refilled: Instant::now(),
            }),
        })
    }

    /// Takes a slot for a new connection at `now`: how long the accept must wait first
    /// (zero when within the rate).
    pub fn take(&self, now: Instant) -> Duration {
        let mut bucket = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = now.saturating_duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(self.rate);
        bucket.refilled = now;
        bucket.tokens -= 1.0;
        if bucket.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-bucket.tokens / self.rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_ip_counts_are_capped_released_and_overridden() {
        let local: IpAddr = [127, 0, 0, 1].into();
        let other: IpAddr = [10, 0, 0, 7].into();
        let overrides = parse_overrides("10.0.0.7:3, [::1]:0").expect("overrides");
        let quotas = Arc::new(PerIpConnections::new(2, overrides));
        let first = quotas.open(local).expect("first");
        let _second = quotas.open(local).expect("second");
        assert_eq!(quotas.open(local).map(|_| ()), Err(2));
        drop(first);
        let _third = quotas.open(local).expect("a slot was released");
        let held: Vec<_> = (0..3)
            .map(|_| quotas.open(other).expect("override"))
            .collect();
        assert_eq!(quotas.open(other).map(|_| ()), Err(3));
        drop(held);
        assert_eq!(
            quotas.open("::1".parse().expect("ip")).map(|_| ()),
            Err(0),
            "an override of 0 refuses the address"
        );
        // An IPv4 client seen as an IPv4-mapped IPv6 address counts as itself.
        let mapped: IpAddr = "::ffff:10.0.0.7".parse().expect("ip");
        assert_eq!(quotas.max_for(mapped), 3);
        for bad in ["10.0.0.7", "broker-1:5", "10.0.0.7:x"] {
            assert!(parse_overrides(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_creation_rate_lets_a_burst_through_then_spaces_connections() {
        assert!(CreationRate::new(i32::MAX as u64).is_none());
        let rate = CreationRate::new(10).expect("limited");
        let start = Instant::now();
        for _ in 0..10 {
            assert_eq!(rate.take(start), Duration::ZERO);
        }
        let wait = rate.take(start);
        assert!(
            wait > Duration::from_millis(90) && wait <= Duration::from_millis(110),
            "{wait:?}"
        );
        // A second later the bucket is full again.
        assert_eq!(rate.take(start + Duration::from_secs(2)), Duration::ZERO);
    }
}

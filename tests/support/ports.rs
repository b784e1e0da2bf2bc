//! Ports for the servers a test starts (also used by the sluice-raft crate's tests, which
//! include this file by path).

/// A port nothing listens on, for a server this test starts.
///
/// Ports are taken below the kernel's ephemeral range (32768 and up on Linux), so an outgoing
/// connection of a client or of another node can never be given a port between this pick and
/// the server's bind; and no port is handed out twice in one test process, as the kernel's
/// `bind(:0)` may do once a port is released (CI saw two nodes of one cluster get the same one).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    // Test binaries run one after another; each starts at its own place in the span.
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let start = std::process::id().wrapping_mul(7_919) % SPAN;
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..SPAN {
        let port = (FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + SPAN);
}

//! A small network lab for partition tests: a network namespace per node and one more holding
//! a Linux bridge, each node's namespace linked to the bridge by a veth, and this host linked
//! to it too, so that nodes talk over real links that can be cut without touching the
//! processes. The bridge lives in its own namespace so that the host's firewall (bridged
//! traffic may pass the host's iptables, whose FORWARD policy may drop it) stays out of the
//! way. Needs root (CAP_NET_ADMIN) and `ip` (iproute2); [`Lab::create`] says why it cannot
//! be built where it cannot. Slow links need `tc` (iproute2) too.
//!
//! A cut is a blackhole, not a reset: each side's neighbour entry for the other is pinned
//! to a MAC address nobody has, so frames vanish on the bridge, connections hang and nobody
//! gets an error. A one-way cut ([`Lab::cut_one_way`]) pins one side's entry only: frames
//! from that side vanish, the other side's still arrive (so a request may be delivered and
//! served while its answer is lost). Cuts are counted per direction, so that faults may
//! overlap: a direction stays cut until every fault that cut it is healed.
//!
//! A slow link ([`Lab::slow`]) is a token-bucket filter (`tbf`) on both ends of a node's
//! veth: a bandwidth limit whose queue adds delay (up to 400 ms) and drops what does not fit.
//! It is the only way to slow a link here: the build machine's kernel has no `netem` qdisc
//! (`tc qdisc add ... netem` fails "Specified qdisc kind is unknown"), so there is no fixed
//! added latency, jitter or random loss.
//!
//! This host keeps reaching every node, whatever is cut. Every fault can be removed
//! ([`Lab::heal`], [`Lab::heal_one_way`], [`Lab::unslow`], or all at once [`Lab::heal_all`]),
//! and everything is removed on drop.

use std::collections::{BTreeSet, HashMap};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

static LABS: AtomicU32 = AtomicU32::new(0);

/// How much a slow link's queue may delay a frame before it is dropped (tbf's `latency`).
pub const SLOW_QUEUE: &str = "400ms";

/// A bridge namespace and `n` node namespaces.
#[derive(Debug)]
pub struct Lab {
    name: String,
    prefix: String,
    namespaces: Vec<String>,
    /// Cut directions `(from, to)`, each with the number of faults that cut it.
    cuts: Mutex<HashMap<(usize, usize), usize>>,
    /// Nodes whose links are slowed.
    slowed: Mutex<BTreeSet<usize>>,
}

/// Runs `program` with `args`; an error, with its stderr, unless it ran and succeeded.
pub fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program} {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

fn tc(args: &[&str]) -> Result<(), String> {
    run("tc", args)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Lab {
    /// A bridge with `n` namespaces attached, addressed `10.X.Y.11`, `.12`, ... (unique per
    /// lab), the host at `.1`.
    pub fn create(n: usize) -> Result<Lab, String> {
        let id = std::process::id() % 10_000;
        let seq = LABS.fetch_add(1, Ordering::Relaxed);
        let name = format!("eb{id}x{seq}");
        let prefix = format!("10.{}.{}", 100 + id % 100, seq % 250);
        let bridge_ns = format!("{name}br");
        let mut lab = Lab {
            name: name.clone(),
            prefix: prefix.clone(),
            namespaces: Vec::new(),
            cuts: Mutex::new(HashMap::new()),
            slowed: Mutex::new(BTreeSet::new()),
        };
        ip(&["netns", "add", &bridge_ns])?;
        ip(&["-n", &bridge_ns, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &bridge_ns, "link", "set", "br0", "up"])?;
        // This host's port on the bridge.
        let host = format!("{name}h");
        ip(&[
            "link", "add", &host, "type", "veth", "peer", "name", "up0", "netns", &bridge_ns,
        ])?;
        ip(&["addr", "add", &format!("{prefix}.1/24"), "dev", &host])?;
        ip(&["link", "set", &host, "up"])?;
        ip(&[
            "-n", &bridge_ns, "link", "set", "up0", "master", "br0", "up",
        ])?;
        for i in 0..n {
            let ns = format!("{name}n{i}");
            ip(&["netns", "add", &ns])?;
            lab.namespaces.push(ns.clone());
            let port = format!("p{i}");
            ip(&[
                "link", "add", &port, "netns", &bridge_ns, "type", "veth", "peer", "name", "eth0",
                "netns", &ns,
            ])?;
            ip(&[
                "-n", &bridge_ns, "link", "set", &port, "master", "br0", "up",
            ])?;
            let addr = format!("{}/24", lab.addr(i));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(lab)
    }

    /// The number of node namespaces.
    pub fn len(&self) -> usize {
        self.namespaces.len()
    }

    /// Whether the lab has no node namespace.
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
    }

    /// Node `i`'s address.
    pub fn addr(&self, i: usize) -> String {
        format!("{}.{}", self.prefix, 11 + i)
    }

    /// The command prefix that runs a program in node `i`'s namespace.
    pub fn exec(&self, i: usize) -> Vec<String> {
        ["ip", "netns", "exec", &self.namespaces[i]]
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    }

    /// Every node but `i`.
    fn peers(&self, i: usize) -> impl Iterator<Item = usize> {
        (0..self.namespaces.len()).filter(move |&j| j != i)
    }

    /// Cuts node `i` from every other node (both directions), silently.
    pub fn cut(&self, i: usize) -> Result<(), String> {
        for j in self.peers(i) {
            self.cut_one_way(i, j)?;
            self.cut_one_way(j, i)?;
        }
        Ok(())
    }

    /// Restores node `i`'s links (those that no other fault still cuts).
    ///
    /// # Errors
    /// If a direction of them is not cut, or `ip` fails.
    pub fn heal(&self, i: usize) -> Result<(), String> {
        for j in self.peers(i) {
            self.heal_one_way(i, j)?;
            self.heal_one_way(j, i)?;
        }
        Ok(())
    }

    /// Frames from node `from` to node `to` vanish from now on; those from `to` to `from`
    /// still arrive (an asymmetric partition). Only `from`'s neighbour entry for `to` is
    /// pinned: `to` still resolves `from`'s MAC address (an ARP reply goes back to the MAC
    /// address its request came from, whatever the neighbour table says).
    pub fn cut_one_way(&self, from: usize, to: usize) -> Result<(), String> {
        assert_ne!(from, to, "a node cannot be cut from itself");
        let mut cuts = lock(&self.cuts);
        let count = cuts.entry((from, to)).or_insert(0);
        if *count == 0 {
            self.pin(from, to)?;
        }
        *count += 1;
        Ok(())
    }

    /// Heals one cut of the direction from `from` to `to`: frames flow again once no fault
    /// cuts it any more (the neighbour entry is deleted and resolved afresh).
    ///
    /// # Errors
    /// If the direction is not cut, or `ip` fails.
    pub fn heal_one_way(&self, from: usize, to: usize) -> Result<(), String> {
        let mut cuts = lock(&self.cuts);
        let count = cuts.get(&(from, to)).copied().unwrap_or(0);
        match count {
            0 => Err(format!("node {from} is not cut from node {to}")),
            1 => {
                self.unpin(from, to)?;
                cuts.remove(&(from, to));
                Ok(())
            }
            more => {
                cuts.insert((from, to), more - 1);
                Ok(())
            }
        }
    }

    /// Slows node `i`'s link both ways to `rate_kbit` kbit/s with a token-bucket filter on
    /// its `eth0` (what it sends) and on its port of the bridge (what it receives): a burst
    /// of 4 KiB, a queue of [`SLOW_QUEUE`], frames beyond it dropped. Replaces an earlier
    /// rate of the same node.
    pub fn slow(&self, i: usize, rate_kbit: u32) -> Result<(), String> {
        let mut slowed = lock(&self.slowed);
        let rate = format!("{rate_kbit}kbit");
        let bridge_ns = self.bridge_ns();
        let port = format!("p{i}");
        for (ns, dev) in [(&self.namespaces[i], "eth0"), (&bridge_ns, port.as_str())] {
            tc(&[
                "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", &rate, "burst",
                "4kb", "latency", SLOW_QUEUE,
            ])?;
        }
        slowed.insert(i);
        Ok(())
    }

    /// Restores node `i`'s link to full speed.
    ///
    /// # Errors
    /// If it is not slowed, or `tc` fails.
    pub fn unslow(&self, i: usize) -> Result<(), String> {
        let mut slowed = lock(&self.slowed);
        if !slowed.contains(&i) {
            return Err(format!("node {i}'s link is not slowed"));
        }
        let bridge_ns = self.bridge_ns();
        let port = format!("p{i}");
        for (ns, dev) in [(&self.namespaces[i], "eth0"), (&bridge_ns, port.as_str())] {
            tc(&["-n", ns, "qdisc", "del", "dev", dev, "root"])?;
        }
        slowed.remove(&i);
        Ok(())
    }

    /// Removes every fault: every cut direction (whatever number of faults cut it) and every
    /// slow link. Goes on past a failure and returns the first.
    pub fn heal_all(&self) -> Result<(), String> {
        let mut first = Ok(());
        let cut: Vec<(usize, usize)> = lock(&self.cuts).drain().map(|(d, _)| d).collect();
        for (from, to) in cut {
            first = first.and(self.unpin(from, to));
        }
        let slowed: Vec<usize> = lock(&self.slowed).iter().copied().collect();
        for i in slowed {
            first = first.and(self.unslow(i));
        }
        first
    }

    /// What is cut or slowed now, in words (for a test's log).
    pub fn faults(&self) -> String {
        let mut cuts: Vec<String> = lock(&self.cuts)
            .iter()
            .map(|((from, to), n)| format!("{from}->{to} cut x{n}"))
            .collect();
        cuts.sort();
        let slowed: Vec<String> = lock(&self.slowed)
            .iter()
            .map(|i| format!("{i} slowed"))
            .collect();
        let all: Vec<String> = cuts.into_iter().chain(slowed).collect();
        if all.is_empty() {
            "none".to_owned()
        } else {
            all.join(", ")
        }
    }

    fn bridge_ns(&self) -> String {
        format!("{}br", self.name)
    }

    /// Frames from `from` to `to` go to a MAC address nobody has.
    fn pin(&self, from: usize, to: usize) -> Result<(), String> {
        ip(&[
            "-n",
            &self.namespaces[from],
            "neigh",
            "replace",
            &self.addr(to),
            "lladdr",
            "02:00:00:00:de:ad",
            "dev",
            "eth0",
            "nud",
            "permanent",
        ])
    }

    /// Deletes `from`'s pinned entry for `to`: the next frame resolves `to` afresh.
    fn unpin(&self, from: usize, to: usize) -> Result<(), String> {
        ip(&[
            "-n",
            &self.namespaces[from],
            "neigh",
            "del",
            &self.addr(to),
            "dev",
            "eth0",
        ])
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        // Deleting the bridge's namespace deletes the bridge and this host's veth with it.
        let _ = ip(&["netns", "del", &self.bridge_ns()]);
        let _ = ip(&["link", "del", &format!("{}h", self.name)]);
    }
}

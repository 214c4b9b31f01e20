//! A small network lab for partition tests: a network namespace per node and one more holding
//! a Linux bridge, each node's namespace linked to the bridge by a veth, and this host linked
//! to it too, so that nodes talk over real links that can be cut without touching the
//! processes. The bridge lives in its own namespace so that the host's firewall (bridged
//! traffic may pass the host's iptables, whose FORWARD policy may drop it) stays out of the
//! way. Needs root (CAP_NET_ADMIN) and `ip` (iproute2); [`Lab::create`] says why it cannot
//! be built where it cannot.
//!
//! A cut is a blackhole, not a reset: each side's neighbour entry for the other is pinned
//! to a MAC address nobody has, so frames vanish on the bridge, connections hang and nobody
//! gets an error. This host keeps reaching every node. Everything is removed on drop.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static LABS: AtomicU32 = AtomicU32::new(0);

/// A bridge namespace and `n` node namespaces.
#[derive(Debug)]
pub struct Lab {
    name: String,
    prefix: String,
    namespaces: Vec<String>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
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

    /// Cuts node `i` from every other node (both directions), silently.
    pub fn cut(&self, i: usize) -> Result<(), String> {
        for j in (0..self.namespaces.len()).filter(|&j| j != i) {
            self.pin(i, j)?;
            self.pin(j, i)?;
        }
        Ok(())
    }

    /// Restores node `i`'s links.
    pub fn heal(&self, i: usize) -> Result<(), String> {
        for j in (0..self.namespaces.len()).filter(|&j| j != i) {
            ip(&[
                "-n",
                &self.namespaces[i],
                "neigh",
                "del",
                &self.addr(j),
                "dev",
                "eth0",
            ])?;
            ip(&[
                "-n",
                &self.namespaces[j],
                "neigh",
                "del",
                &self.addr(i),
                "dev",
                "eth0",
            ])?;
        }
        Ok(())
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
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        // Deleting the bridge's namespace deletes the bridge and this host's veth with it.
        let _ = ip(&["netns", "del", &format!("{}br", self.name)]);
        let _ = ip(&["link", "del", &format!("{}h", self.name)]);
    }
}

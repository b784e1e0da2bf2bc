//! Committed offsets kept beside each group shard's state, so `/metrics` computes consumer lag
//! without taking any shard's lock (the groups' own maps stay the shard's).
//!
//! Every change to a group's committed offsets is a record replayed by its shard (a commit,
//! a tombstone, a transaction's commit marker), and each replay updates the shard's index
//! too. An index lives as long as its shard: an unloaded shard drops it, and its groups leave
//! the metrics with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::protocol::TopicPartition;

/// One shard's committed offsets, by group and partition.
#[derive(Default)]
pub struct CommittedIndex {
    groups: Mutex<HashMap<String, HashMap<TopicPartition, i64>>>,
}

impl CommittedIndex {
    pub fn set(&self, group_id: &str, partition: &TopicPartition, offset: i64) {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let offsets = match groups.get_mut(group_id) {
            Some(offsets) => offsets,
            None => groups.entry(group_id.to_owned()).or_default(),
        };
        match offsets.get_mut(partition) {
            Some(slot) => *slot = offset,
            None => {
                offsets.insert(partition.clone(), offset);
            }
        }
    }

    pub fn remove(&self, group_id: &str, partition: &TopicPartition) {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(offsets) = groups.get_mut(group_id) {
            offsets.remove(partition);
            if offsets.is_empty() {
                groups.remove(group_id);
            }
        }
    }

    /// Whether the index holds exactly these offsets for the group (debug checks).
    pub fn matches<'a>(
        &self,
        group_id: &str,
        offsets: Option<impl Iterator<Item = (&'a TopicPartition, i64)>>,
    ) -> bool {
        let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let indexed = groups.get(group_id);
        let mut count = 0;
        for (partition, offset) in offsets.into_iter().flatten() {
            count += 1;
            if indexed.and_then(|o| o.get(partition)) != Some(&offset) {
                return false;
            }
        }
        indexed.map_or(0, HashMap::len) == count
    }

    fn for_each(&self, each: &mut dyn FnMut(&str, &TopicPartition, i64)) {
        let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        for (group_id, offsets) in groups.iter() {
            for (partition, offset) in offsets {
                each(group_id, partition, *offset);
            }
        }
    }
}

/// The indexes of every shard loaded here.
#[derive(Default)]
pub struct CommittedIndexes {
    shards: Mutex<Vec<Weak<CommittedIndex>>>,
}

impl CommittedIndexes {
    /// A new shard's index (the indexes of shards gone are dropped from the list here).
    pub fn new_shard(&self) -> Arc<CommittedIndex> {
        let index = Arc::new(CommittedIndex::default());
        let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        shards.retain(|shard| shard.strong_count() > 0);
        shards.push(Arc::downgrade(&index));
        index
    }

    /// Every committed offset of the shards loaded here: (group, partition, offset).
    pub fn for_each(&self, each: &mut dyn FnMut(&str, &TopicPartition, i64)) {
        let live: Vec<Arc<CommittedIndex>> = self
            .shards
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for index in live {
            index.for_each(each);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(indexes: &CommittedIndexes) -> Vec<(String, String, i64)> {
        let mut out = Vec::new();
        indexes.for_each(&mut |group, tp, offset| {
            out.push((group.to_owned(), tp.to_string(), offset))
        });
        out.sort();
        out
    }

    #[test]
    fn offsets_follow_sets_and_removes_and_leave_with_their_shard() {
        let indexes = CommittedIndexes::default();
        let (a, b) = (indexes.new_shard(), indexes.new_shard());
        let (t0, t1) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        a.set("g", &t0, 5);
        a.set("g", &t0, 7);
        a.set("g", &t1, 1);
        b.set("h", &t0, 3);
        a.remove("g", &t1);
        assert_eq!(
            all(&indexes),
            [("g".into(), "t-0".into(), 7), ("h".into(), "t-0".into(), 3)]
        );
        drop(b);
        assert_eq!(all(&indexes), [("g".into(), "t-0".into(), 7)]);
        a.remove("g", &t0);
        assert!(all(&indexes).is_empty());
        let _c = indexes.new_shard();
        assert_eq!(
            indexes.shards.lock().unwrap().len(),
            2,
            "the dropped shard's entry went"
        );
    }
}

//! The compacting pool's attempts that can be taken back: each saves a page before it first
//! changes it, and a failed attempt puts the saved pages (and their free ranges) back.

use super::{CompactingPool, HeapPage};
use crate::memory::PageKey;

impl CompactingPool {
    /// Starts an attempt that may be taken back: pages it changes are saved first (`touch`).
    pub(super) fn begin(&mut self) {
        self.marks.push(self.journal.len());
    }

    /// Saves page `key` as it is, once per attempt, before the attempt changes it.
    pub(super) fn touch(&mut self, key: PageKey) {
        let Some(&mark) = self.marks.last() else {
            return;
        };
        if self.journal[mark..].iter().any(|(saved, _)| *saved == key) {
            return;
        }
        if let Some(page) = self.pages.get(key) {
            self.journal.push((key, page.clone()));
        }
    }

    /// Keeps what the latest attempt changed (an enclosing attempt may still take it back).
    pub(super) fn commit(&mut self) {
        self.marks.pop();
        if self.marks.is_empty() {
            self.journal.clear();
        }
    }

    /// Takes back what the latest attempt changed: its saved pages, latest first.
    pub(super) fn rollback(&mut self) {
        let Some(mark) = self.marks.pop() else {
            return;
        };
        let saved: Vec<(PageKey, HeapPage)> = self.journal.drain(mark..).rev().collect();
        for (key, page) in saved {
            if let Some(now) = self.pages.get(key) {
                for (&offset, &len) in &now.free {
                    self.free.remove(&(len, key, offset));
                }
            }
            if !page.retiring && !page.dedicated {
                for (&offset, &len) in &page.free {
                    self.free.insert((len, key, offset));
                }
            }
            if let Some(now) = self.pages.get_mut(key) {
                *now = page;
            }
        }
    }
}

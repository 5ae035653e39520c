//! When free pages go back to the device: a page that became fully free is stamped with the tick
//! the pool's periodic cleanup first saw it free, and returned once it stayed free for the pool's
//! `release_after_ticks`. Cost per tick: the pages that changed, never the pages that exist.

use crate::memory::PageKey;
use std::collections::VecDeque;

/// Fully free pages waiting to be stamped, and stamped pages in stamp order.
#[derive(Debug, Default)]
pub struct IdlePages {
    unstamped: Vec<PageKey>,
    stamped: VecDeque<(u64, PageKey)>,
}

impl IdlePages {
    /// Notes that `page` became fully free; `listed` is the page's flag that it is noted already.
    pub fn became_free(&mut self, page: PageKey, listed: &mut bool) {
        if !*listed {
            *listed = true;
            self.unstamped.push(page);
        }
    }

    /// Stamps the pages noted since the last call with `tick`; `still_free` clears a page's
    /// `listed` flag and says whether it is still fully free and was not stamped before.
    pub fn stamp(&mut self, tick: u64, mut still_free: impl FnMut(PageKey) -> bool) {
        for page in self.unstamped.drain(..) {
            if still_free(page) {
                self.stamped.push_back((tick, page));
            }
        }
    }

    /// Removes and returns the oldest entry stamped at least `after` ticks before `tick`.
    pub fn pop_expired(&mut self, tick: u64, after: u64) -> Option<(u64, PageKey)> {
        match self.stamped.front() {
            Some(&(stamp, _)) if tick.saturating_sub(stamp) >= after => self.stamped.pop_front(),
            _ => None,
        }
    }

    /// Number of entries waiting (a page freed, reused and freed again may appear twice).
    pub fn len(&self) -> usize {
        self.unstamped.len() + self.stamped.len()
    }
}

//! When free pages go back to the device, the one rule of sliced and exclusive pools: a page that
//! became fully free is stamped with the tick the pool's periodic cleanup first saw it free, and
//! returned once it stayed free for the pool's `release_after_ticks`; a page reused in between is
//! kept. Cost per tick: the pages that changed, never the pages that exist.

use crate::memory::PageKey;
use slotmap::SlotMap;
use std::collections::VecDeque;

/// A page's state under the release rule, kept in the page.
#[derive(Clone, Debug, Default)]
pub struct IdleMark {
    /// Tick the periodic cleanup first saw the page fully free.
    since: Option<u64>,
    /// Whether the page waits in `IdlePages` to be stamped.
    listed: bool,
}

impl IdleMark {
    /// Notes that the page was taken: the time it stayed free starts again when it is next free.
    pub fn reused(&mut self) {
        self.since = None;
    }
}

/// A page of a pool, as the release rule sees it.
pub trait IdlePage {
    /// Whether nothing lives in the page.
    fn is_free(&self) -> bool;
    /// The page's mark.
    fn idle_mark(&mut self) -> &mut IdleMark;
}

/// A pool's fully free pages waiting to be stamped, and stamped pages in stamp order.
#[derive(Debug)]
pub struct IdlePages {
    /// The pool's `release_after_ticks`; `None`: free pages stay until `cleanup`.
    release_after: Option<u64>,
    unstamped: Vec<PageKey>,
    stamped: VecDeque<(u64, PageKey)>,
}

impl IdlePages {
    /// The rule for a pool that returns pages free for `release_after` ticks, or never.
    pub fn new(release_after: Option<u64>) -> IdlePages {
        IdlePages {
            release_after,
            unstamped: Vec::new(),
            stamped: VecDeque::new(),
        }
    }

    /// Notes that page `key` became fully free.
    pub fn became_free(&mut self, key: PageKey, mark: &mut IdleMark) {
        if self.release_after.is_some() && !mark.listed {
            mark.listed = true;
            self.unstamped.push(key);
        }
    }

    /// Stamps the pages of `pages` that became free since the last call with `tick`, and removes
    /// from the queue and returns those that stayed free `release_after` ticks since their stamp;
    /// the caller returns them to the device.
    pub fn take_expired<P: IdlePage>(
        &mut self,
        tick: u64,
        pages: &mut SlotMap<PageKey, P>,
    ) -> Vec<PageKey> {
        let Some(after) = self.release_after else {
            return Vec::new();
        };
        for key in self.unstamped.drain(..) {
            let Some(page) = pages.get_mut(key) else {
                continue;
            };
            let free = page.is_free();
            let mark = page.idle_mark();
            mark.listed = false;
            if free && mark.since.is_none() {
                mark.since = Some(tick);
                self.stamped.push_back((tick, key));
            }
        }
        let mut expired = Vec::new();
        while let Some(&(stamp, key)) = self.stamped.front()
            && tick.saturating_sub(stamp) >= after
        {
            self.stamped.pop_front();
            // A page reused since its stamp has a newer stamp, or none while in use.
            if let Some(page) = pages.get_mut(key)
                && page.is_free()
                && page.idle_mark().since == Some(stamp)
            {
                expired.push(key);
            }
        }
        expired
    }

    /// Number of entries waiting (a page freed, reused and freed again may appear twice).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.unstamped.len() + self.stamped.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct TestPage {
        in_use: bool,
        mark: IdleMark,
    }

    impl IdlePage for TestPage {
        fn is_free(&self) -> bool {
            !self.in_use
        }
        fn idle_mark(&mut self) -> &mut IdleMark {
            &mut self.mark
        }
    }

    fn free(rule: &mut IdlePages, pages: &mut SlotMap<PageKey, TestPage>, key: PageKey) {
        let page = &mut pages[key];
        page.in_use = false;
        rule.became_free(key, &mut page.mark);
    }

    fn take(pages: &mut SlotMap<PageKey, TestPage>, key: PageKey) {
        let page = &mut pages[key];
        page.in_use = true;
        page.mark.reused();
    }

    #[test]
    fn a_page_free_for_release_after_ticks_from_its_first_stamp_is_returned() {
        let mut rule = IdlePages::new(Some(3));
        let mut pages = SlotMap::with_key();
        let key = pages.insert(TestPage::default());
        free(&mut rule, &mut pages, key);
        assert!(
            rule.take_expired(10, &mut pages).is_empty(),
            "stamped at 10"
        );
        // Noted free again without being taken: the first stamp still counts.
        free(&mut rule, &mut pages, key);
        assert!(rule.take_expired(11, &mut pages).is_empty());
        assert!(rule.take_expired(12, &mut pages).is_empty());
        assert_eq!(rule.take_expired(13, &mut pages), vec![key]);
        assert_eq!(rule.len(), 0);
    }

    #[test]
    fn a_page_reused_in_between_is_kept_and_counts_again_from_its_next_stamp() {
        let mut rule = IdlePages::new(Some(3));
        let mut pages = SlotMap::with_key();
        let key = pages.insert(TestPage::default());
        free(&mut rule, &mut pages, key);
        assert!(rule.take_expired(10, &mut pages).is_empty());
        take(&mut pages, key);
        assert!(rule.take_expired(13, &mut pages).is_empty(), "in use: kept");
        free(&mut rule, &mut pages, key);
        assert!(
            rule.take_expired(14, &mut pages).is_empty(),
            "stamped at 14"
        );
        assert!(rule.take_expired(16, &mut pages).is_empty());
        assert_eq!(rule.take_expired(17, &mut pages), vec![key]);
    }

    #[test]
    fn without_release_after_ticks_free_pages_are_never_listed() {
        let mut rule = IdlePages::new(None);
        let mut pages = SlotMap::with_key();
        let key = pages.insert(TestPage::default());
        free(&mut rule, &mut pages, key);
        assert_eq!(rule.len(), 0);
        assert!(rule.take_expired(u64::MAX, &mut pages).is_empty());
    }
}

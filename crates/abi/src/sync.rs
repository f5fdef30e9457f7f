//! Locks that stay usable after a panic.
//!
//! A panic inside a hook is caught at the FFI boundary and reported as that
//! hook's error; the host and the plugin go on. A lock the panicking code
//! held is then poisoned, but what it guards was left consistent by every
//! writer here (no multi-step update spans a call that can panic), so the
//! rest of the process takes it as is instead of panicking in turn. One
//! helper, so that choice is made (and documented) once.
//!
//! Also [`SetOnce`], the cell a plugin's SDK keeps what the host hands it
//! at `init` in.

use std::sync::{
    atomic::{AtomicPtr, Ordering},
    Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
};

/// Locks `mutex`, taking it over if a panicking holder poisoned it.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Read-locks `lock`, taking it over if poisoned.
pub fn read<T: ?Sized>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Write-locks `lock`, taking it over if poisoned.
pub fn write<T: ?Sized>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A value set once and then read without a lock, like `OnceLock`, but
/// set by inline code: `OnceLock::set` calls a cold generic function of
/// its own, which a plugin's linker places anywhere in its code. Each
/// page of code a plugin runs while it loads costs the host 64 KB of
/// resident memory (the kernel maps the pages around each fault), and the
/// `init` of a plugin set three such cells: measured with 100 plugins.
pub(crate) struct SetOnce<T: 'static>(AtomicPtr<T>, std::marker::PhantomData<std::sync::OnceLock<T>>);

impl<T: 'static> SetOnce<T> {
    /// An empty cell.
    pub(crate) const fn new() -> Self {
        // The marker gives the cell `OnceLock`'s `Send` and `Sync` (a value
        // set on one thread is read on others), which `AtomicPtr` alone
        // would give any `T`.
        SetOnce(AtomicPtr::new(std::ptr::null_mut()), std::marker::PhantomData)
    }

    /// Sets the value unless one was set: false then, `value` dropped.
    /// A value set lives as long as the process (as a static's would).
    pub(crate) fn set(&self, value: T) -> bool {
        let new = Box::into_raw(Box::new(value));
        match self.0.compare_exchange(std::ptr::null_mut(), new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(_) => {
                // SAFETY: `new` comes from `Box::into_raw` just above and
                // was not published (the exchange failed), so this is its
                // only owner.
                #[allow(unsafe_code)]
                drop(unsafe { Box::from_raw(new) });
                false
            }
        }
    }

    /// The value, once set.
    #[inline]
    pub(crate) fn get(&self) -> Option<&'static T> {
        // SAFETY: the pointer is null or was published by `set` from a
        // leaked box (Release / Acquire), which nothing ever frees.
        #[allow(unsafe_code)]
        unsafe {
            self.0.load(Ordering::Acquire).as_ref()
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_poisoned_lock_is_taken_over() {
        let m = std::sync::Arc::new(std::sync::Mutex::new(1));
        let held = m.clone();
        let _ = std::thread::spawn(move || {
            let _guard = held.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *super::lock(&m) += 1;
        assert_eq!(*super::lock(&m), 2);
    }

    /// The first value set stays; a later one is refused and dropped,
    /// also when threads race to set it.
    #[test]
    fn a_set_once_cell_keeps_the_first_value() {
        static CELL: super::SetOnce<String> = super::SetOnce::new();
        assert_eq!(CELL.get(), None);
        let winners: usize = std::thread::scope(|s| {
            let tries: Vec<_> = (0..8).map(|i| s.spawn(move || CELL.set(format!("value {i}")))).collect();
            tries.into_iter().map(|t| usize::from(t.join().unwrap())).sum()
        });
        assert_eq!(winners, 1);
        let first = CELL.get().unwrap().clone();
        assert!(first.starts_with("value "));
        assert!(!CELL.set("later".into()));
        assert_eq!(CELL.get(), Some(&first));
    }
}

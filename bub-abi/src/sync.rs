//! Locks that stay usable after a panic.
//!
//! A panic inside a hook is caught at the FFI boundary and reported as that
//! hook's error; the host and the plugin go on. A lock the panicking code
//! held is then poisoned, but what it guards was left consistent by every
//! writer here (no multi-step update spans a call that can panic), so the
//! rest of the process takes it as is instead of panicking in turn. One
//! helper, so that choice is made (and documented) once.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

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
}

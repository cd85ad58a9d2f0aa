//! The names a client chooses (data sets, classes, models): checked once, so that none can
//! climb out of a folder, hide as a dot file or confuse a shell.

use crate::error::ApiError;

/// The longest name accepted.
pub const MAX_NAME: usize = 64;

/// `name` when it is 1 to 64 characters of ASCII letters, digits, `_`, `-` and `.`, starting
/// with a letter or digit; else a 422 error naming `what` and the name.
pub fn check(what: &str, name: &str) -> Result<(), ApiError> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if first_ok && rest_ok && name.len() <= MAX_NAME {
        return Ok(());
    }
    Err(ApiError::invalid(format!(
        "{what} {name:?} is not a valid name: 1 to {MAX_NAME} ASCII letters, digits, '_', '-' \
         or '.', starting with a letter or digit"
    )))
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn path_tricks_and_odd_names_are_refused() {
        for bad in ["", "..", "../x", "a/b", ".hidden", "a\\b", "x y", "é", "-rf", &"a".repeat(65)]
        {
            assert!(check("class", bad).is_err(), "{bad:?} was accepted");
        }
        for good in ["healthy", "leaf_spot", "v1.2-rc", "A", &"a".repeat(64)] {
            assert!(check("class", good).is_ok(), "{good:?} was refused");
        }
    }
}

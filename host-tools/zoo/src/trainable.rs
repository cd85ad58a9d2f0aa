//! Choosing what a training step updates: `all`, the classifier `head`, every `bias`, or
//! parameters picked by name patterns with `*` wildcards (`features.6.*,classifier.*`).

use crate::ZooModel;
use sprout_core::TensorId;
use std::fmt;

/// A `--trainable` choice that selects nothing sensible.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectError {
    /// The choice, or one of its comma-separated entries, is empty.
    Empty { choice: String },
    /// An entry selects no parameter of the model.
    NoMatch { pattern: String },
}

impl fmt::Display for SelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectError::Empty { choice } => write!(
                f,
                "trainable choice '{choice}' has an empty entry; give all, head, bias or \
                 comma-separated parameter-name patterns"
            ),
            SelectError::NoMatch { pattern } => write!(
                f,
                "trainable pattern '{pattern}' matches no parameter of the model (a pattern \
                 matches whole names; `*` stands for any text)"
            ),
        }
    }
}

impl std::error::Error for SelectError {}

/// The parameters a `--trainable` choice selects, in the graph's order, each once.
///
/// `choice` is a comma-separated list of entries; an entry is one of
/// - `all`: every parameter;
/// - `head`: the classifier head ([`ZooModel::head`]);
/// - `bias`: every parameter whose name ends in `.bias`, batch-norm shifts included;
/// - a parameter-name pattern where `*` matches any text, dots included
///   (`features.6.*`, `*.bn2.weight`, `fc.bias`).
///
/// Batch-norm running statistics are buffers, never selected; nor are parameters no
/// gradient reaches (an int8 layer's weight scales). Every entry must select at
/// least one parameter, so a mistyped pattern is an error that names it.
pub fn select_trainable(model: &ZooModel, choice: &str) -> Result<Vec<TensorId>, SelectError> {
    let entries: Vec<&str> = choice.split(',').map(str::trim).collect();
    if entries.iter().any(|e| e.is_empty()) {
        return Err(SelectError::Empty { choice: choice.to_string() });
    }
    let graph = &model.graph;
    let mut used = vec![false; entries.len()];
    let selected = graph
        .differentiable_parameters()
        .into_iter()
        .filter(|&id| {
            let name = graph.tensor(id).name.as_str();
            let mut chosen = false;
            for (entry, used) in entries.iter().zip(used.iter_mut()) {
                if selects(entry, model, id, name) {
                    (*used, chosen) = (true, true);
                }
            }
            chosen
        })
        .collect();
    match entries.iter().zip(&used).find(|(_, &used)| !used) {
        Some((entry, _)) => Err(SelectError::NoMatch { pattern: entry.to_string() }),
        None => Ok(selected),
    }
}

/// Whether one entry of a choice selects the parameter `id` named `name`.
fn selects(entry: &str, model: &ZooModel, id: TensorId, name: &str) -> bool {
    match entry {
        "all" => true,
        "head" => model.head.contains(&id),
        "bias" => name.ends_with(".bias"),
        pattern => glob_match(pattern, name),
    }
}

/// Whether `name` matches `pattern` as a whole, where `*` matches any (possibly empty) text.
fn glob_match(pattern: &str, name: &str) -> bool {
    let mut pieces: Vec<&str> = pattern.split('*').collect();
    let last = pieces.pop().unwrap_or_default();
    if pieces.is_empty() {
        return name == last;
    }
    let Some(mut rest) = name.strip_prefix(pieces[0]) else {
        return false;
    };
    for piece in &pieces[1..] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_match_whole_names() {
        assert!(glob_match("fc.bias", "fc.bias"));
        assert!(!glob_match("fc", "fc.bias"));
        assert!(glob_match("features.6.*", "features.6.conv.1.0.weight"));
        assert!(!glob_match("features.6.*", "features.16.conv.1.0.weight"));
        assert!(glob_match("*.bn2.weight", "layer3.1.bn2.weight"));
        assert!(glob_match("layer*.conv*.weight", "layer2.0.conv1.weight"));
        assert!(!glob_match("layer*.conv*.weight", "layer2.0.downsample.0.weight"));
        assert!(glob_match("*", "anything"));
        // The suffix may not reuse text a middle piece consumed.
        assert!(!glob_match("a*ab*b", "aab"));
        assert!(glob_match("a*ab*b", "aabb"));
    }
}

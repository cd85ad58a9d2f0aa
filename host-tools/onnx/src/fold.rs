//! Constant folding at import time: the shape-computing subgraphs PyTorch's exporters emit
//! (`Shape → Gather → Unsqueeze → Concat → Reshape`, `ConstantOfShape`, `Cast`, integer
//! arithmetic) are evaluated from the static shapes the importer knows, so that the ops
//! sprout records see constants. Also the dimension arithmetic of Reshape, Squeeze and
//! Unsqueeze, shared by constants and computed tensors.

use crate::import::{parse_tensor, Const, ConstData};
use std::rc::Rc;

/// The most elements a folded constant may have (a shape computation stays small).
const MAX_FOLDED: usize = 1 << 24;

/// Whether `op_type` is evaluated here when all of its inputs are constants.
pub(crate) fn folds(op_type: &str) -> bool {
    matches!(
        op_type,
        "Gather"
            | "Concat"
            | "Cast"
            | "ConstantOfShape"
            | "Add"
            | "Sub"
            | "Mul"
            | "Div"
            | "Slice"
            | "Transpose"
            | "Range"
    )
}

/// What a node being folded says, as the importer reads it.
pub(crate) struct FoldNode<'a> {
    pub op_type: &'a str,
    pub out: &'a str,
    pub int: &'a dyn Fn(&str) -> Option<i64>,
    pub ints: Option<&'a [i64]>,
    pub tensor: Option<&'a crate::proto::TensorProto>,
}

/// Evaluates a node whose inputs (`None`: an omitted optional one) are all constants.
pub(crate) fn eval(node: &FoldNode, inputs: &[Option<Rc<Const>>]) -> Result<Const, String> {
    let arg = |i: usize| -> Result<&Const, String> {
        inputs.get(i).and_then(|c| c.as_deref()).ok_or_else(|| format!("input {i} is missing"))
    };
    let out = node.out.to_string();
    let c = match node.op_type {
        "Gather" => gather(arg(0)?, arg(1)?, (node.int)("axis").unwrap_or(0))?,
        "Concat" => {
            let axis = (node.int)("axis").ok_or("attribute 'axis' is required")?;
            let parts: Vec<&Const> = inputs.iter().flatten().map(|c| c.as_ref()).collect();
            concat(&parts, axis)?
        }
        "Cast" => cast(arg(0)?, (node.int)("to").ok_or("attribute 'to' is required")?)?,
        "ConstantOfShape" => {
            let dims = to_dims(ints(arg(0)?)?)?;
            let numel = numel(&dims)?;
            let value = match node.tensor {
                Some(t) => parse_tensor(t, "value").map_err(|e| e.to_string())?.data,
                None => ConstData::F32(vec![0.0]),
            };
            let data = match value {
                ConstData::F32(v) if v.len() == 1 => ConstData::F32(vec![v[0]; numel]),
                ConstData::I64(v) if v.len() == 1 => ConstData::I64(vec![v[0]; numel]),
                _ => return Err("attribute 'value' must hold one element".into()),
            };
            Const { name: out.clone(), dims, data }
        }
        "Add" | "Sub" | "Mul" | "Div" => binary(node.op_type, arg(0)?, arg(1)?)?,
        "Slice" => {
            let opt = |i: usize| inputs.get(i).and_then(|c| c.as_deref()).map(ints);
            slice(
                arg(0)?,
                ints(arg(1)?)?,
                ints(arg(2)?)?,
                opt(3).transpose()?,
                opt(4).transpose()?,
            )?
        }
        "Transpose" => transpose(arg(0)?, node.ints)?,
        "Range" => range(arg(0)?, arg(1)?, arg(2)?)?,
        other => return Err(format!("{other} cannot be constant-folded")),
    };
    Ok(Const { name: out, ..c })
}

/// `Shape` of a tensor of `dims`: its dims as int64, `start..end` (opset 15) applied.
pub(crate) fn shape_of(dims: &[usize], start: i64, end: Option<i64>, out: &str) -> Const {
    let rank = dims.len() as i64;
    let clamp = |i: i64| (if i < 0 { i + rank } else { i }).clamp(0, rank) as usize;
    let (s, e) = (clamp(start), clamp(end.unwrap_or(rank)));
    let v: Vec<i64> = dims[s..e.max(s)].iter().map(|&d| d as i64).collect();
    Const { name: out.into(), dims: vec![v.len()], data: ConstData::I64(v) }
}

/// The dims `Reshape` gives an input of `dims` for the shape `spec` (0 copies a dim unless
/// `allow_zero`, one -1 is inferred).
pub(crate) fn reshape_dims(
    spec: &[i64],
    dims: &[usize],
    allow_zero: bool,
) -> Result<Vec<usize>, String> {
    let numel: usize = dims.iter().product();
    let mut target = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &s) in spec.iter().enumerate() {
        target.push(match s {
            0 if !allow_zero => *dims.get(i).ok_or_else(|| {
                format!("shape {spec:?} copies dimension {i}, the input {dims:?} has none")
            })?,
            -1 if infer.is_none() => {
                infer = Some(i);
                1
            }
            s if s > 0 => s as usize,
            _ => return Err(format!("shape {spec:?} is not supported for input {dims:?}")),
        });
    }
    let known: usize = target.iter().product();
    if let Some(i) = infer {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(format!("shape {spec:?} does not fit input {dims:?}"));
        }
        target[i] = numel / known;
    }
    if target.iter().product::<usize>() != numel {
        return Err(format!(
            "shape {spec:?} gives {target:?}, which does not hold the {numel} elements of {dims:?}"
        ));
    }
    Ok(target)
}

/// An axis in `-rank..rank` as an index.
pub(crate) fn axis(a: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    match a {
        a if (0..r).contains(&a) => Ok(a as usize),
        a if (-r..0).contains(&a) => Ok((a + r) as usize),
        a => Err(format!("axis {a} is out of range for rank {rank}")),
    }
}

/// `dims` without the listed size-1 axes (all size-1 axes when `axes` is `None`).
pub(crate) fn squeeze_dims(dims: &[usize], axes: Option<&[i64]>) -> Result<Vec<usize>, String> {
    let Some(axes) = axes else { return Ok(dims.iter().copied().filter(|&d| d != 1).collect()) };
    let drop: Vec<usize> = axes.iter().map(|&a| axis(a, dims.len())).collect::<Result<_, _>>()?;
    if let Some(&a) = drop.iter().find(|&&a| dims[a] != 1) {
        return Err(format!("cannot squeeze axis {a} of shape {dims:?}: its size is not 1"));
    }
    Ok(dims.iter().enumerate().filter(|(i, _)| !drop.contains(i)).map(|(_, &d)| d).collect())
}

/// `dims` with size-1 axes inserted at `axes` (positions in the result).
pub(crate) fn unsqueeze_dims(dims: &[usize], axes: &[i64]) -> Result<Vec<usize>, String> {
    let rank = dims.len() + axes.len();
    let mut at: Vec<usize> = axes.iter().map(|&a| axis(a, rank)).collect::<Result<_, _>>()?;
    at.sort_unstable();
    if at.windows(2).any(|w| w[0] == w[1]) {
        return Err(format!("axes {axes:?} repeat an axis"));
    }
    let mut rest = dims.iter();
    Ok((0..rank).map(|i| if at.contains(&i) { 1 } else { *rest.next().expect("rank") }).collect())
}

fn ints(c: &Const) -> Result<&[i64], String> {
    c.i64().map_err(|e| e.to_string())
}

fn floats(c: &Const) -> Result<&[f32], String> {
    c.f32().map_err(|e| e.to_string())
}

fn numel(dims: &[usize]) -> Result<usize, String> {
    dims.iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= MAX_FOLDED)
        .ok_or_else(|| format!("a folded constant of shape {dims:?} exceeds {MAX_FOLDED} elements"))
}

fn to_dims(v: &[i64]) -> Result<Vec<usize>, String> {
    v.iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension in {v:?}")))
        .collect()
}

/// Picks elements: `pick(i)` is the source index of output element `i`.
fn select(data: &ConstData, n: usize, pick: impl Fn(usize) -> usize) -> ConstData {
    match data {
        ConstData::F32(v) => ConstData::F32((0..n).map(|i| v[pick(i)]).collect()),
        ConstData::I64(v) => ConstData::I64((0..n).map(|i| v[pick(i)]).collect()),
    }
}

fn gather(data: &Const, indices: &Const, axis_attr: i64) -> Result<Const, String> {
    let a = axis(axis_attr, data.dims.len())?;
    let len = data.dims[a];
    let inner: usize = data.dims[a + 1..].iter().product();
    let idx: Vec<usize> = ints(indices)?
        .iter()
        .map(|&i| {
            let j = if i < 0 { i + len as i64 } else { i };
            usize::try_from(j)
                .ok()
                .filter(|&j| j < len)
                .ok_or_else(|| format!("index {i} is out of range for axis {a} of {:?}", data.dims))
        })
        .collect::<Result<_, _>>()?;
    let dims: Vec<usize> =
        data.dims[..a].iter().chain(&indices.dims).chain(&data.dims[a + 1..]).copied().collect();
    let n = numel(&dims)?;
    let k = idx.len();
    let data =
        select(&data.data, n, |i| (i / (k * inner) * len + idx[i / inner % k]) * inner + i % inner);
    Ok(Const { name: String::new(), dims, data })
}

fn concat(parts: &[&Const], axis_attr: i64) -> Result<Const, String> {
    let first = parts.first().ok_or("Concat has no inputs")?;
    let a = axis(axis_attr, first.dims.len())?;
    let same = |c: &Const| {
        c.dims.len() == first.dims.len()
            && c.dims.iter().zip(&first.dims).enumerate().all(|(i, (x, y))| i == a || x == y)
    };
    if let Some(c) = parts.iter().find(|c| !same(c)) {
        return Err(format!(
            "inputs of shapes {:?} and {:?} do not concatenate",
            first.dims, c.dims
        ));
    }
    let outer: usize = first.dims[..a].iter().product();
    let mut dims = first.dims.clone();
    dims[a] = parts.iter().map(|c| c.dims[a]).sum();
    numel(&dims)?;
    let rows = |c: &Const| c.numel() / outer.max(1);
    let data = match first.data {
        ConstData::F32(_) => {
            let vs: Vec<&[f32]> = parts.iter().map(|c| floats(c)).collect::<Result<_, _>>()?;
            ConstData::F32(
                (0..outer)
                    .flat_map(|o| {
                        vs.iter().zip(parts).flat_map(move |(v, c)| {
                            v[o * rows(c)..(o + 1) * rows(c)].iter().copied()
                        })
                    })
                    .collect(),
            )
        }
        ConstData::I64(_) => {
            let vs: Vec<&[i64]> = parts.iter().map(|c| ints(c)).collect::<Result<_, _>>()?;
            ConstData::I64(
                (0..outer)
                    .flat_map(|o| {
                        vs.iter().zip(parts).flat_map(move |(v, c)| {
                            v[o * rows(c)..(o + 1) * rows(c)].iter().copied()
                        })
                    })
                    .collect(),
            )
        }
    };
    Ok(Const { name: String::new(), dims, data })
}

/// A `Transpose`'s `perm` (default: the axes reversed) as axis indices.
pub(crate) fn permutation(perm: Option<&[i64]>, rank: usize) -> Result<Vec<usize>, String> {
    let perm: Vec<usize> = match perm {
        None => (0..rank).rev().collect(),
        Some(p) => p.iter().map(|&a| axis(a, rank)).collect::<Result<_, _>>()?,
    };
    let mut sorted = perm.clone();
    sorted.sort_unstable();
    if sorted != (0..rank).collect::<Vec<_>>() {
        return Err(format!("perm {perm:?} is not a permutation of rank {rank}"));
    }
    Ok(perm)
}

/// A transpose of `dims` by `perm` in its fewest axes: size-1 axes but the batch axis (0)
/// dropped, and axes that stay neighbours, in order, merged into one (never into the batch
/// axis). Returns the merged input's dims and the permutation of them.
pub(crate) fn merged_permutation(dims: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let kept: Vec<usize> = perm.iter().copied().filter(|&a| a == 0 || dims[a] != 1).collect();
    let mut order = kept.clone();
    order.sort_unstable();
    let rank_of = |a: usize| order.iter().position(|&b| b == a).unwrap_or(0);
    // Runs of input axes, in output order.
    let mut runs: Vec<Vec<usize>> = Vec::new();
    for &a in &kept {
        match runs.last_mut() {
            Some(run) if run[0] != 0 && rank_of(run[run.len() - 1]) + 1 == rank_of(a) => {
                run.push(a)
            }
            _ => runs.push(vec![a]),
        }
    }
    let mut by_input: Vec<usize> = (0..runs.len()).collect();
    by_input.sort_by_key(|&r| runs[r][0]);
    let merged = by_input.iter().map(|&r| runs[r].iter().map(|&a| dims[a]).product()).collect();
    let perm =
        (0..runs.len()).map(|r| by_input.iter().position(|&s| s == r).unwrap_or(0)).collect();
    (merged, perm)
}

/// The fewest transposes of at most `max_blocks` merged axes each (see
/// [`merged_permutation`]) that together reorder `dims` by `perm`, the batch axis staying
/// first: each step's permutation of the layout the step before left. `None` when `perm`
/// moves the batch axis or `dims` has more than seven axes (a search over their orders).
pub(crate) fn transpose_steps(
    dims: &[usize],
    perm: &[usize],
    max_blocks: usize,
) -> Option<Vec<Vec<usize>>> {
    let rank = dims.len();
    if rank > 7 || perm.first() != Some(&0) {
        return None;
    }
    // Every order of the axes after the batch axis, as a candidate step.
    let mut candidates = vec![vec![0]];
    for _ in 1..rank {
        candidates = candidates
            .iter()
            .flat_map(|c| (1..rank).filter(|a| !c.contains(a)).map(|a| [&c[..], &[a]].concat()))
            .collect();
    }
    // Breadth first over layouts (which input axis sits where), from the input's.
    let start: Vec<usize> = (0..rank).collect();
    let mut came_from = std::collections::HashMap::from([(start.clone(), None)]);
    let mut frontier = std::collections::VecDeque::from([start]);
    while let Some(layout) = frontier.pop_front() {
        if layout == perm {
            let mut steps = Vec::new();
            let mut at = layout;
            while let Some(Some((before, step))) = came_from.get(&at).cloned() {
                steps.push(step);
                at = before;
            }
            steps.reverse();
            return Some(steps);
        }
        let shape: Vec<usize> = layout.iter().map(|&a| dims[a]).collect();
        for step in &candidates {
            let next: Vec<usize> = step.iter().map(|&i| layout[i]).collect();
            if !came_from.contains_key(&next)
                && merged_permutation(&shape, step).0.len() <= max_blocks
            {
                came_from.insert(next.clone(), Some((layout.clone(), step.clone())));
                frontier.push_back(next);
            }
        }
    }
    None
}

/// The `(start, end)` each axis of `dims` keeps under ONNX `Slice`'s `starts`, `ends`,
/// `axes` and `steps` (negative indices count from the end, ranges are clamped; only
/// steps of 1 are supported).
pub(crate) fn slice_ranges(
    dims: &[usize],
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<Vec<(usize, usize)>, String> {
    let n = starts.len();
    if ends.len() != n || axes.is_some_and(|a| a.len() != n) || steps.is_some_and(|s| s.len() != n)
    {
        return Err(format!(
            "starts {starts:?}, ends {ends:?}, axes {axes:?} and steps {steps:?} differ in length"
        ));
    }
    let mut ranges: Vec<(usize, usize)> = dims.iter().map(|&d| (0, d)).collect();
    for (k, (&s, &e)) in starts.iter().zip(ends).enumerate() {
        let a = axis(axes.map_or(k as i64, |a| a[k]), dims.len())?;
        let step = steps.map_or(1, |s| s[k]);
        if step != 1 {
            return Err(format!("step {step} is not supported (1 is)"));
        }
        let len = dims[a] as i64;
        let clamp = |i: i64| (if i < 0 { i + len } else { i }).clamp(0, len) as usize;
        let (lo, hi) = (clamp(s), clamp(e));
        ranges[a] = (lo, hi.max(lo));
    }
    Ok(ranges)
}

/// `perm` (default: reversed axes) applied to a constant, moving its data.
fn transpose(c: &Const, perm: Option<&[i64]>) -> Result<Const, String> {
    let rank = c.dims.len();
    let perm = permutation(perm, rank)?;
    let dims: Vec<usize> = perm.iter().map(|&a| c.dims[a]).collect();
    // Row-major strides of the source, read in the output's axis order.
    let mut strides = vec![1; rank];
    for k in (0..rank.saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * c.dims[k + 1];
    }
    let pick = |i: usize| {
        let (mut rem, mut at) = (i, 0);
        for k in (0..rank).rev() {
            at += rem % dims[k] * strides[perm[k]];
            rem /= dims[k];
        }
        at
    };
    let data = select(&c.data, c.numel(), pick);
    Ok(Const { name: String::new(), dims, data })
}

fn cast(c: &Const, to: i64) -> Result<Const, String> {
    use crate::proto::{BOOL, DOUBLE, FLOAT, INT32, INT64};
    let data = match (&c.data, to as i32) {
        (ConstData::F32(v), FLOAT | DOUBLE) => ConstData::F32(v.clone()),
        (ConstData::I64(v), FLOAT | DOUBLE) => {
            ConstData::F32(v.iter().map(|&x| x as f32).collect())
        }
        (ConstData::F32(v), INT64 | INT32) => ConstData::I64(v.iter().map(|&x| x as i64).collect()),
        (ConstData::I64(v), INT64 | INT32) => ConstData::I64(v.clone()),
        (ConstData::F32(v), BOOL) => ConstData::I64(v.iter().map(|&x| (x != 0.0) as i64).collect()),
        (ConstData::I64(v), BOOL) => ConstData::I64(v.iter().map(|&x| (x != 0) as i64).collect()),
        (_, other) => {
            return Err(format!("Cast to type {other} is not supported (float, int and bool are)"))
        }
    };
    Ok(Const { name: String::new(), dims: c.dims.clone(), data })
}

/// A broadcast shape and, for each of its elements, the element of each operand it reads.
type Broadcast = (Vec<usize>, Vec<(usize, usize)>);

/// The shape `a` and `b` broadcast to (numpy rules: aligned from the right, each pair of
/// axes equal or one of them 1).
pub(crate) fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let rank = a.len().max(b.len());
    let at = |d: &[usize], k: usize| (k + d.len()).checked_sub(rank).map_or(1, |j| d[j]);
    (0..rank)
        .map(|k| match (at(a, k), at(b, k)) {
            (x, y) if x == y => Ok(x),
            (1, y) => Ok(y),
            (x, 1) => Ok(x),
            _ => Err(format!("shapes {a:?} and {b:?} do not broadcast")),
        })
        .collect()
}

/// The broadcast shape of `a` and `b` (numpy rules), and for each output element the index
/// of the element of `a` and of `b` it reads.
fn broadcast(a: &[usize], b: &[usize]) -> Result<Broadcast, String> {
    let dims = broadcast_shape(a, b)?;
    let rank = dims.len();
    let pad = |d: &[usize]| -> Vec<usize> {
        std::iter::repeat_n(1, rank - d.len()).chain(d.iter().copied()).collect()
    };
    let (pa, pb) = (pad(a), pad(b));
    let n = numel(&dims)?;
    let index = |i: usize, p: &[usize]| {
        let (mut rem, mut at, mut stride) = (i, 0, 1);
        for k in (0..rank).rev() {
            let coord = rem % dims[k];
            rem /= dims[k];
            if p[k] != 1 {
                at += coord * stride;
            }
            stride *= p[k];
        }
        at
    };
    Ok((dims.clone(), (0..n).map(|i| (index(i, &pa), index(i, &pb))).collect()))
}

/// `Range(start, limit, delta)` of three scalars of one type: `start + i · delta` while
/// short of `limit` (the dynamo exporter's indices over a batch it takes as symbolic).
fn range(start: &Const, limit: &Const, delta: &Const) -> Result<Const, String> {
    let count = |span: f64, step: f64| -> Result<usize, String> {
        let n = (span / step).ceil().max(0.0);
        match step != 0.0 && n.is_finite() && n <= MAX_FOLDED as f64 {
            true => Ok(n as usize),
            false => {
                Err(format!("a range of {span} in steps of {step} has no size up to {MAX_FOLDED}"))
            }
        }
    };
    let data = match (&start.data, &limit.data, &delta.data) {
        (ConstData::I64(s), ConstData::I64(l), ConstData::I64(d))
            if [s, l, d].iter().all(|v| v.len() == 1) =>
        {
            let (s, d) = (s[0], d[0]);
            let n = count(l[0] as f64 - s as f64, d as f64)?;
            ConstData::I64((0..n as i64).map(|i| s.wrapping_add(i.wrapping_mul(d))).collect())
        }
        (ConstData::F32(s), ConstData::F32(l), ConstData::F32(d))
            if [s, l, d].iter().all(|v| v.len() == 1) =>
        {
            let (s, d) = (s[0], d[0]);
            let n = count(f64::from(l[0]) - f64::from(s), f64::from(d))?;
            ConstData::F32((0..n).map(|i| s + i as f32 * d).collect())
        }
        _ => return Err("start, limit and delta must be scalars of one type".into()),
    };
    let n = match &data {
        ConstData::I64(v) => v.len(),
        ConstData::F32(v) => v.len(),
    };
    Ok(Const { name: String::new(), dims: vec![n], data })
}

fn binary(op: &str, a: &Const, b: &Const) -> Result<Const, String> {
    let (dims, at) = broadcast(&a.dims, &b.dims)?;
    let data = match (&a.data, &b.data) {
        (ConstData::F32(x), ConstData::F32(y)) => {
            let f = match op {
                "Add" => |p: f32, q: f32| p + q,
                "Sub" => |p, q| p - q,
                "Mul" => |p, q| p * q,
                _ => |p, q| p / q,
            };
            ConstData::F32(at.iter().map(|&(i, j)| f(x[i], y[j])).collect())
        }
        (ConstData::I64(x), ConstData::I64(y)) => {
            let mut v = Vec::with_capacity(at.len());
            for &(i, j) in &at {
                v.push(match op {
                    "Add" => x[i].wrapping_add(y[j]),
                    "Sub" => x[i].wrapping_sub(y[j]),
                    "Mul" => x[i].wrapping_mul(y[j]),
                    "Div" if y[j] == 0 => return Err("integer division by zero".into()),
                    // ONNX integer Div truncates, as Rust's does.
                    _ => x[i].wrapping_div(y[j]),
                });
            }
            ConstData::I64(v)
        }
        _ => return Err(format!("operands '{}' and '{}' mix float and integer", a.name, b.name)),
    };
    Ok(Const { name: String::new(), dims, data })
}

fn slice(
    data: &Const,
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<Const, String> {
    let rank = data.dims.len();
    let ranges = slice_ranges(&data.dims, starts, ends, axes, steps)?;
    let dims: Vec<usize> = ranges.iter().map(|&(lo, hi)| hi - lo).collect();
    let n = numel(&dims)?;
    let pick = |i: usize| {
        let (mut rem, mut at, mut stride) = (i, 0, 1);
        for k in (0..rank).rev() {
            at += (rem % dims[k] + ranges[k].0) * stride;
            rem /= dims[k];
            stride *= data.dims[k];
        }
        at
    };
    let data = select(&data.data, n, pick);
    Ok(Const { name: String::new(), dims, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(dims: &[usize], v: Vec<f32>) -> Const {
        Const { name: "t".into(), dims: dims.to_vec(), data: ConstData::F32(v) }
    }

    fn i64s(dims: &[usize], v: Vec<i64>) -> Const {
        Const { name: "i".into(), dims: dims.to_vec(), data: ConstData::I64(v) }
    }

    /// `[2, 3, 4]` holding `100 a + 10 b + c` at `(a, b, c)`.
    fn cube() -> Const {
        let v = (0..24).map(|i| (100 * (i / 12) + 10 * (i / 4 % 3) + i % 4) as f32).collect();
        f32s(&[2, 3, 4], v)
    }

    #[test]
    fn a_pixel_shuffle_transpose_is_two_of_at_most_four_blocks() {
        // DepthToSpace (CRD) of [N, C, 2, 2, H, W]: six blocks, the batch axis apart.
        let (dims, perm) = ([2, 3, 2, 2, 5, 7], [0, 1, 4, 2, 5, 3]);
        assert_eq!(merged_permutation(&dims, &perm).0.len(), 6);
        let steps = transpose_steps(&dims, &perm, 4).unwrap();
        assert_eq!(steps.len(), 2);
        let mut layout: Vec<usize> = (0..6).collect();
        for step in &steps {
            let shape: Vec<usize> = layout.iter().map(|&a| dims[a]).collect();
            assert!(merged_permutation(&shape, step).0.len() <= 4, "{step:?} on {shape:?}");
            layout = step.iter().map(|&i| layout[i]).collect();
        }
        assert_eq!(layout, perm);
        assert_eq!(transpose_steps(&dims, &[1, 0, 2, 3, 4, 5], 4), None);
    }

    #[test]
    fn range_counts_up_and_down_and_refuses_a_zero_step() {
        let scalar = |v: i64| i64s(&[], vec![v]);
        let up = range(&scalar(0), &scalar(7), &scalar(3)).unwrap();
        assert_eq!((&up.dims[..], up.i64().unwrap()), (&[3][..], &[0, 3, 6][..]));
        let down = range(&scalar(5), &scalar(1), &scalar(-2)).unwrap();
        assert_eq!(down.i64().unwrap(), [5, 3]);
        assert_eq!(range(&scalar(5), &scalar(1), &scalar(1)).unwrap().dims, [0]);
        assert!(range(&scalar(0), &scalar(1), &scalar(0)).is_err());
        let f = |v: f32| f32s(&[], vec![v]);
        assert_eq!(range(&f(0.5), &f(2.0), &f(0.5)).unwrap().f32().unwrap(), [0.5, 1.0, 1.5]);
    }

    #[test]
    fn gather_on_a_middle_axis_with_a_negative_index() {
        let g = gather(&cube(), &i64s(&[2], vec![2, -3]), 1).unwrap();
        assert_eq!(g.dims, [2, 2, 4]);
        let mut expected = Vec::new();
        for a in 0..2 {
            for b in [2, 0] {
                expected.extend((0..4).map(|c| (100 * a + 10 * b + c) as f32));
            }
        }
        assert_eq!(g.f32().unwrap(), expected);
        assert!(gather(&cube(), &i64s(&[], vec![3]), 1).unwrap_err().contains("index 3"));
    }

    #[test]
    fn transpose_moves_data_and_concat_joins_on_an_inner_axis() {
        let t = transpose(&cube(), Some(&[2, 0, 1])).unwrap();
        assert_eq!(t.dims, [4, 2, 3]);
        let v = t.f32().unwrap();
        for c in 0..4 {
            for a in 0..2 {
                for b in 0..3 {
                    assert_eq!(v[(c * 2 + a) * 3 + b], (100 * a + 10 * b + c) as f32);
                }
            }
        }
        let j = concat(&[&cube(), &f32s(&[2, 1, 4], vec![-1.0; 8])], 1).unwrap();
        assert_eq!(j.dims, [2, 4, 4]);
        let v = j.f32().unwrap();
        for a in 0..2 {
            for b in 0..4 {
                for c in 0..4 {
                    let e = if b == 3 { -1.0 } else { (100 * a + 10 * b + c) as f32 };
                    assert_eq!(v[(a * 4 + b) * 4 + c], e);
                }
            }
        }
    }

    #[test]
    fn slice_and_broadcasting_arithmetic() {
        let s = slice(&cube(), &[1, -1], &[3, i64::MAX], Some(&[1, 2]), None).unwrap();
        assert_eq!(s.dims, [2, 2, 1]);
        assert_eq!(s.f32().unwrap(), [13.0, 23.0, 113.0, 123.0]);
        let sum = binary("Sub", &cube(), &f32s(&[3, 1], vec![1.0, 2.0, 3.0])).unwrap();
        let base = cube();
        for (i, (&v, &b)) in sum.f32().unwrap().iter().zip(base.f32().unwrap()).enumerate() {
            assert_eq!(v, b - (1 + i / 4 % 3) as f32);
        }
        let q = binary("Div", &i64s(&[2], vec![7, -7]), &i64s(&[], vec![2])).unwrap();
        assert_eq!(q.i64().unwrap(), [3, -3]);
        assert!(binary("Add", &cube(), &f32s(&[2], vec![0.0; 2])).is_err());
    }

    #[test]
    fn reshape_squeeze_and_unsqueeze_dims() {
        assert_eq!(reshape_dims(&[0, -1], &[2, 3, 4], false).unwrap(), [2, 12]);
        assert!(reshape_dims(&[5, -1], &[2, 3, 4], false).is_err());
        assert_eq!(squeeze_dims(&[2, 1, 3, 1], Some(&[-1])).unwrap(), [2, 1, 3]);
        assert!(squeeze_dims(&[2, 1], Some(&[0])).is_err());
        assert_eq!(unsqueeze_dims(&[2, 3], &[0, -1]).unwrap(), [1, 2, 3, 1]);
    }
}

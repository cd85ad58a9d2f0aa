//! Operator chains that sprout records as one op: layer normalisation (`ReduceMean → Sub →
//! Pow → ReduceMean → Add → Sqrt → Div`, then the optional scale `Mul` and shift `Add`),
//! exact GELU (`Div(√2) → Erf → Add(1) → Mul(x) → Mul(½)`) and its tanh form (`x + 0.044715
//! · x · x · x`, `· √(2/π) → Tanh`, then the same tail), as PyTorch's TorchScript exporter
//! writes them before opsets 17 and 20, SiLU (`Mul(x, Sigmoid(x))`), as every opset
//! writes it, and softplus with PyTorch's threshold (`Where(Greater(βx, 20), x,
//! Softplus(βx) / β)`), as the dynamo exporter writes it.

use crate::import::parse_tensor;
use crate::proto::{GraphProto, NodeProto};
use sprout_core::reference::pointwise::{GELU_CUBIC, SOFTPLUS_LINEAR_ABOVE, SQRT_2_OVER_PI};
use std::collections::{HashMap, HashSet};

/// One recognised chain, recorded when the importer reaches its last node.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Fused {
    /// Layer normalisation of `x` over its last `axes` axes; `scale` and `shift` name the
    /// constants of the affine map that follows, when there is one.
    LayerNorm { x: String, axes: usize, eps: f32, scale: Option<String>, shift: Option<String> },
    /// GELU of `x`, exact or (`tanh`) PyTorch's tanh approximation.
    Gelu { x: String, tanh: bool },
    /// `x · sigmoid(x)`.
    Silu { x: String },
    /// `softplus(β · x) / β`, which is `x` itself where `β · x` is above 20 (sprout's
    /// softplus, like PyTorch's, is linear there).
    Softplus { x: String, beta: f32 },
}

/// The chains of `graph`: by the index of each chain's last node, and the indices of the
/// nodes inside them (which the importer skips).
pub(crate) fn find(graph: &GraphProto, opset: i64) -> (HashMap<usize, Fused>, HashSet<usize>) {
    let g = View::new(graph, opset);
    let (mut last, mut inside) = (HashMap::new(), HashSet::new());
    for i in 0..graph.node.len() {
        let found = match g.op(i) {
            "ReduceMean" => g.layer_norm(i),
            "Erf" => g.gelu(i),
            "Tanh" => g.gelu_tanh(i),
            "Sigmoid" => g.silu(i),
            "Where" => g.softplus(i),
            _ => None,
        };
        if let Some((fused, nodes)) = found {
            let (end, rest) = nodes.split_last().expect("a chain has nodes");
            if rest.iter().chain([end]).all(|n| !inside.contains(n) && !last.contains_key(n)) {
                inside.extend(rest.iter().copied());
                last.insert(*end, fused);
            }
        }
    }
    (last, inside)
}

/// The graph as the matcher reads it: producers and readers of each value.
struct View<'g> {
    graph: &'g GraphProto,
    opset: i64,
    readers: HashMap<&'g str, Vec<usize>>,
    producer: HashMap<&'g str, usize>,
}

impl<'g> View<'g> {
    fn new(graph: &'g GraphProto, opset: i64) -> Self {
        let (mut readers, mut producer) = (HashMap::<&str, Vec<usize>>::new(), HashMap::new());
        for (i, n) in graph.node.iter().enumerate() {
            for input in &n.input {
                readers.entry(input.as_str()).or_default().push(i);
            }
            for out in &n.output {
                producer.insert(out.as_str(), i);
            }
        }
        for out in graph.output.iter().filter_map(|o| o.name.as_deref()) {
            // A graph output is read from outside: it never hides inside a chain.
            readers.entry(out).or_default().push(usize::MAX);
        }
        Self { graph, opset, readers, producer }
    }

    fn node(&self, i: usize) -> &'g NodeProto {
        &self.graph.node[i]
    }

    fn op(&self, i: usize) -> &'g str {
        let n = self.node(i);
        match n.domain.as_deref() {
            None | Some("") | Some("ai.onnx") => n.op_type.as_deref().unwrap_or(""),
            Some(_) => "",
        }
    }

    fn out(&self, i: usize) -> &'g str {
        self.node(i).output.first().map_or("", String::as_str)
    }

    /// The one node reading `value`, when exactly one does.
    fn only_reader(&self, value: &str) -> Option<usize> {
        match self.readers.get(value).map(Vec::as_slice) {
            Some(&[r]) if r != usize::MAX => Some(r),
            _ => None,
        }
    }

    /// The node reading the output of `i`, alone, when it is an `op`; with the input of it
    /// that is not that output.
    fn next(&self, i: usize, op: &str) -> Option<(usize, &'g str)> {
        let r = self.only_reader(self.out(i))?;
        let n = self.node(r);
        if self.op(r) != op || n.input.len() != 2 {
            return None;
        }
        let other = if n.input[0] == self.out(i) { &n.input[1] } else { &n.input[0] };
        Some((r, other.as_str()))
    }

    /// The value of a one-element float constant (an initializer or a `Constant` node).
    fn scalar(&self, name: &str) -> Option<f32> {
        let c = self.constant(name)?;
        match c.f32().ok()? {
            [v] => Some(*v),
            _ => None,
        }
    }

    /// Whether `name` is a constant (an initializer or a `Constant` node's output, possibly
    /// through `Identity` nodes).
    fn is_constant(&self, name: &str) -> bool {
        self.constant(name).is_some()
    }

    fn constant(&self, name: &str) -> Option<crate::import::Const> {
        // The TorchScript exporter shares equal initializers through Identity nodes. A file
        // may chain them in a cycle: no more hops than there are nodes.
        let mut value = name;
        let mut hops = 0..=self.graph.node.len();
        let n = loop {
            hops.next()?;
            let found = self.graph.initializer.iter().find(|t| t.name.as_deref() == Some(value));
            if let Some(t) = found {
                return parse_tensor(t, name).ok();
            }
            let n = self.node(*self.producer.get(value)?);
            if n.op_type.as_deref() != Some("Identity") {
                break n;
            }
            value = n.input.first()?;
        };
        if n.op_type.as_deref() != Some("Constant") {
            return None;
        }
        let a = n.attribute.first()?;
        match a.name.as_deref()? {
            "value" => parse_tensor(a.t.as_ref()?, name).ok(),
            "value_float" => Some(crate::import::Const {
                name: name.into(),
                dims: vec![],
                data: crate::import::ConstData::F32(vec![a.f?]),
            }),
            _ => None,
        }
    }

    /// The last-axes count a `ReduceMean` (keeping dims) averages over: `[-k, ..., -1]`.
    fn trailing_axes(&self, i: usize) -> Option<usize> {
        let n = self.node(i);
        let keep = n.attribute.iter().find(|a| a.name.as_deref() == Some("keepdims"));
        if keep.and_then(|a| a.i).is_some_and(|k| k == 0) {
            return None;
        }
        let axes: Vec<i64> = if self.opset < 18 {
            n.attribute.iter().find(|a| a.name.as_deref() == Some("axes"))?.ints.clone()
        } else {
            self.constant(n.input.get(1)?)?.i64().ok()?.to_vec()
        };
        let mut sorted = axes.clone();
        sorted.sort_unstable();
        let k = sorted.len();
        (k > 0 && sorted.iter().zip(-(k as i64)..).all(|(&a, want)| a == want)).then_some(k)
    }

    /// Layer normalisation from its first `ReduceMean` (`i`), and the chain's nodes in order.
    fn layer_norm(&self, i: usize) -> Option<(Fused, Vec<usize>)> {
        let axes = self.trailing_axes(i)?;
        let x = self.node(i).input.first()?.as_str();
        // Sub(x, mean): x is read by the mean and the subtraction (and maybe others).
        let sub = self.only_reader(self.out(i))?;
        let sn = self.node(sub);
        if self.op(sub) != "Sub" || sn.input.len() != 2 || sn.input[0] != x {
            return None;
        }
        let centred = self.out(sub);
        let readers = self.readers.get(centred)?;
        let [a, b] = readers[..] else { return None };
        let (pow, div) = if self.op(a) == "Pow" { (a, b) } else { (b, a) };
        if self.op(pow) != "Pow" || self.op(div) != "Div" {
            return None;
        }
        if self.node(pow).input.first().map(String::as_str) != Some(centred)
            || self.scalar(self.node(pow).input.get(1)?) != Some(2.0)
        {
            return None;
        }
        let var = self.only_reader(self.out(pow))?;
        if self.op(var) != "ReduceMean" || self.trailing_axes(var) != Some(axes) {
            return None;
        }
        let (add, eps) = self.next(var, "Add")?;
        let eps = self.scalar(eps)?;
        let sqrt = self.only_reader(self.out(add))?;
        if self.op(sqrt) != "Sqrt" || self.only_reader(self.out(sqrt)) != Some(div) {
            return None;
        }
        let dn = self.node(div);
        if dn.input.len() != 2 || dn.input[0] != centred || dn.input[1] != self.out(sqrt) {
            return None;
        }
        let mut nodes = vec![i, sub, pow, var, add, sqrt, div];
        let (mut scale, mut shift) = (None, None);
        if let Some((mul, gamma)) = self.next(div, "Mul").filter(|(_, c)| self.is_constant(c)) {
            nodes.push(mul);
            scale = Some(gamma.to_string());
            if let Some((add, beta)) = self.next(mul, "Add").filter(|(_, c)| self.is_constant(c)) {
                nodes.push(add);
                shift = Some(beta.to_string());
            }
        }
        Some((Fused::LayerNorm { x: x.into(), axes, eps, scale, shift }, nodes))
    }

    /// Exact GELU from its `Erf` (`i`): `x / √2` (or `x · (1/√2)`) before it, `+ 1`, `· x`
    /// and `· ½` (in either order) after it; the chain's nodes in order.
    fn gelu(&self, i: usize) -> Option<(Fused, Vec<usize>)> {
        let scaled = self.node(i).input.first()?;
        let pre = *self.producer.get(scaled.as_str())?;
        let pn = self.node(pre);
        if pn.input.len() != 2 || self.only_reader(scaled) != Some(i) {
            return None;
        }
        let (x, c) = (pn.input[0].as_str(), self.scalar(&pn.input[1])?);
        let close = |a: f32, b: f32| (a - b).abs() <= 1e-6 * b.abs();
        let ok = match self.op(pre) {
            "Div" => close(c, core::f32::consts::SQRT_2),
            "Mul" => close(c, core::f32::consts::FRAC_1_SQRT_2),
            _ => false,
        };
        if !ok {
            return None;
        }
        let nodes = [vec![pre, i], self.half_x_times_one_plus(i, x)?].concat();
        Some((Fused::Gelu { x: x.into(), tanh: false }, nodes))
    }

    /// GELU's tanh form from its `Tanh` (`i`): `Mul(x, x) → Mul(x) → Mul(0.044715) → Add(x)
    /// → Mul(√(2/π))` before it (constants on either side), the tail of [`Self::gelu`] after
    /// it; the chain's nodes in order.
    fn gelu_tanh(&self, i: usize) -> Option<(Fused, Vec<usize>)> {
        let (scale, inner) = self.times_constant(self.node(i).input.first()?, i, SQRT_2_OVER_PI)?;
        let add = self.single_use(inner, scale, "Add")?;
        let an = &self.node(add).input;
        if an.len() != 2 {
            return None;
        }
        // `x + c · x³`: the operand a `Mul` by 0.044715 made holds the cube, the other is `x`.
        let (cubic, cube, x) = [(0, 1), (1, 0)].into_iter().find_map(|(c, x)| {
            let (m, cube) = self.times_constant(&an[c], add, GELU_CUBIC)?;
            Some((m, cube, an[x].as_str()))
        })?;
        let cube_node = self.single_use(cube, cubic, "Mul")?;
        let square = self.other_operand(cube_node, x)?;
        let square_node = self.single_use(square, cube_node, "Mul")?;
        if self.node(square_node).input.iter().any(|v| v != x) {
            return None;
        }
        let head = vec![square_node, cube_node, cubic, add, scale, i];
        let nodes = [head, self.half_x_times_one_plus(i, x)?].concat();
        Some((Fused::Gelu { x: x.into(), tanh: true }, nodes))
    }

    /// The node making `value`, when it is an `op` that only `reader` reads.
    fn single_use(&self, value: &str, reader: usize, op: &str) -> Option<usize> {
        let p = *self.producer.get(value)?;
        (self.op(p) == op && self.only_reader(value) == Some(reader)).then_some(p)
    }

    /// The input of binary node `i` that is not `operand`, when one of them is.
    fn other_operand(&self, i: usize, operand: &str) -> Option<&'g str> {
        match &self.node(i).input[..] {
            [a, b] if a == operand => Some(b),
            [a, b] if b == operand => Some(a),
            _ => None,
        }
    }

    /// `value`'s producer, read only by `reader`, when it is a `Mul` by a scalar constant
    /// within 1e-6 (relative) of `c` on either side: the producer and its other operand.
    fn times_constant(&self, value: &str, reader: usize, c: f32) -> Option<(usize, &'g str)> {
        let m = self.single_use(value, reader, "Mul")?;
        let n = &self.node(m).input;
        let is_c = |v: &str| self.scalar(v).is_some_and(|s| (s - c).abs() <= 1e-6 * c);
        match &n[..] {
            [a, b] if is_c(a) => Some((m, b)),
            [a, b] if is_c(b) => Some((m, a)),
            _ => None,
        }
    }

    /// GELU's tail after node `i` computes `erf(x / √2)` or `tanh(…)`: `+ 1`, `· x` and `· ½`
    /// (the half on either side, or applied to `x` first); its nodes, the last one last.
    fn half_x_times_one_plus(&self, i: usize, x: &str) -> Option<Vec<usize>> {
        let (plus, one) = self.next(i, "Add")?;
        if self.scalar(one) != Some(1.0) {
            return None;
        }
        let (m1, other1) = self.next(plus, "Mul")?;
        // `x · (1 + f) · ½`, `(1 + f) · ½ · x` (the dynamo exporter at opset 18), or
        // `(x · ½) · (1 + f)` where the half came first.
        if self.scalar(other1) == Some(0.5) {
            let (m2, other2) = self.next(m1, "Mul")?;
            return (other2 == x).then(|| vec![plus, m1, m2]);
        }
        if other1 == x {
            let (m2, half) = self.next(m1, "Mul")?;
            return (self.scalar(half) == Some(0.5)).then(|| vec![plus, m1, m2]);
        }
        let half = *self.producer.get(other1)?;
        let hn = self.node(half);
        let halves_x = self.op(half) == "Mul"
            && hn.input.len() == 2
            && hn.input.iter().any(|v| v == x)
            && hn.input.iter().any(|v| self.scalar(v) == Some(0.5))
            && self.only_reader(other1) == Some(m1);
        halves_x.then(|| vec![half, plus, m1])
    }

    /// SiLU from its `Sigmoid` (`i`): the sigmoid's output read only by a `Mul` of it and
    /// the sigmoid's own input (in either order); the chain's nodes in order.
    fn silu(&self, i: usize) -> Option<(Fused, Vec<usize>)> {
        let x = self.node(i).input.first()?.as_str();
        let (mul, other) = self.next(i, "Mul")?;
        (other == x && !self.is_constant(x)).then(|| (Fused::Silu { x: x.into() }, vec![i, mul]))
    }

    /// Softplus with PyTorch's threshold from its `Where` (`i`): `Where(Greater(s, 20), x,
    /// y)` where `s` is `x` and `y` `Softplus(x)`, or `s` is `Mul(x, β)` and `y`
    /// `Div(Softplus(s), β)` (β a scalar constant, on either side of the `Mul`); every
    /// value inside read by the chain alone; its nodes in order.
    fn softplus(&self, i: usize) -> Option<(Fused, Vec<usize>)> {
        let [cond, x, y] = &self.node(i).input[..] else { return None };
        let greater = self.single_use(cond, i, "Greater")?;
        let [s, threshold] = &self.node(greater).input[..] else { return None };
        if self.scalar(threshold) != Some(SOFTPLUS_LINEAR_ABOVE) || self.is_constant(x) {
            return None;
        }
        if s == x {
            let soft = self.single_use(y, i, "Softplus")?;
            return (self.node(soft).input.first() == Some(x))
                .then(|| (Fused::Softplus { x: x.clone(), beta: 1.0 }, vec![soft, greater, i]));
        }
        // `s = x · β`, read by the Softplus and the Greater alone.
        let mul = *self.producer.get(s.as_str())?;
        let beta = self.other_operand(mul, x).filter(|_| self.op(mul) == "Mul")?;
        let beta_value = self.scalar(beta)?;
        let div = self.single_use(y, i, "Div")?;
        let [soft_out, divisor] = &self.node(div).input[..] else { return None };
        let soft = self.single_use(soft_out, div, "Softplus")?;
        let mut readers = self.readers.get(s.as_str())?.clone();
        readers.sort_unstable();
        let mut expected = vec![soft, greater];
        expected.sort_unstable();
        let fits = self.node(soft).input.first() == Some(s)
            && self.scalar(divisor) == Some(beta_value)
            && readers == expected
            && beta_value.is_finite()
            && beta_value > 0.0;
        let fused = Fused::Softplus { x: x.clone(), beta: beta_value };
        fits.then(|| (fused, vec![mul, soft, div, greater, i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::AttributeProto;

    /// `ReduceMean → Sub → Pow(centred, p) → ReduceMean → Add(eps) → Sqrt → Div`, the
    /// exponent `p` through the nodes `feed`.
    fn layer_norm_graph(feed: Vec<NodeProto>, eps_readers: usize) -> GraphProto {
        let mean = |name: &str, x: &str, y: &str| {
            NodeProto::new("ReduceMean", name, &[x], &[y]).with(AttributeProto::ints("axes", &[-1]))
        };
        let mut node = feed;
        node.extend([
            mean("m", "x", "mu"),
            NodeProto::new("Sub", "s", &["x", "mu"], &["c"]),
            NodeProto::new("Pow", "p", &["c", "two"], &["sq"]),
            mean("v", "sq", "var"),
            NodeProto::new("Add", "a", &["var", "eps"], &["ve"]),
            NodeProto::new("Sqrt", "r", &["ve"], &["sd"]),
            NodeProto::new("Div", "d", &["c", "sd"], &["y"]),
        ]);
        for i in 0..eps_readers {
            node.push(NodeProto::new("Neg", &format!("n{i}"), &["sd"], &[&format!("z{i}")]));
        }
        let eps = crate::proto::TensorProto::f32("eps", &[], &[1e-5]);
        GraphProto { node, initializer: vec![eps], ..Default::default() }
    }

    #[test]
    fn a_layer_norm_chain_is_found_through_identity_nodes() {
        let two = crate::proto::TensorProto::f32("two0", &[], &[2.0]);
        let feed = vec![NodeProto::new("Identity", "i", &["two0"], &["two"])];
        let mut graph = layer_norm_graph(feed, 0);
        graph.initializer.push(two);
        let (last, inside) = find(&graph, 13);
        let fused =
            Fused::LayerNorm { x: "x".into(), axes: 1, eps: 1e-5, scale: None, shift: None };
        assert_eq!(last.get(&7), Some(&fused));
        assert_eq!(inside.len(), 6);
        // A value inside the chain that another node reads keeps the chain apart.
        let mut graph =
            layer_norm_graph(vec![NodeProto::new("Identity", "i", &["two0"], &["two"])], 1);
        graph.initializer.push(crate::proto::TensorProto::f32("two0", &[], &[2.0]));
        assert!(find(&graph, 13).0.is_empty());
    }

    /// Identity nodes feeding each other in a cycle end the search for a constant instead of
    /// recursing without end.
    #[test]
    fn identity_nodes_in_a_cycle_are_no_constant() {
        let feed = vec![
            NodeProto::new("Identity", "i", &["loop"], &["two"]),
            NodeProto::new("Identity", "j", &["two"], &["loop"]),
        ];
        let (last, inside) = find(&layer_norm_graph(feed, 0), 13);
        assert!(last.is_empty() && inside.is_empty());
    }
}

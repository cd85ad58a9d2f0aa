//! The conformance suite on the reference backend against itself: every kernel must agree
//! bit for bit, so the suite is deterministic and drives both sides identically.

#[test]
fn reference_agrees_with_itself_bit_for_bit() {
    sprout_tests::conformance::check_reference();
}

/// A backend one kernel of which is off by 0.1 % must fail the suite: the tolerance is
/// tight enough to catch a real error.
#[test]
#[should_panic(expected = "conv2d_grad_weight")]
fn a_backend_with_a_wrong_kernel_fails() {
    struct OffByATenthOfAPercent;
    impl sprout_core::Backend for OffByATenthOfAPercent {
        type Memory = sprout_core::Host;
    }
    sprout_core::inherit_reference!(OffByATenthOfAPercent: Dense, Vector, Activation, Pointwise, Pool,
        Norm, LayerNorm,
        Dropout, Loss, Optimizer, Half, LossScale, Int8, Int8Layer, Int8GradInput, Int8Training);
    impl sprout_core::backend::ConvKernels for OffByATenthOfAPercent {
        fn conv2d(
            &mut self,
            x: &[f32],
            w: &[f32],
            b: Option<&[f32]>,
            y: &mut [f32],
            g: &sprout_core::geometry::Conv2dGeometry,
        ) {
            sprout_core::reference::conv2d(x, w, b, y, g)
        }
        fn conv2d_norm_act(
            &mut self,
            x: &[f32],
            w: &[f32],
            b: Option<&[f32]>,
            then: sprout_core::backend::NormAct<'_, sprout_core::Host>,
            y: &mut [f32],
            g: &sprout_core::geometry::Conv2dGeometry,
        ) {
            let norm = then.frozen_norm();
            sprout_core::reference::conv2d_norm_act(x, w, b, norm, then.rectifier, y, g)
        }
        fn conv2d_grad_input(
            &mut self,
            dy: &[f32],
            w: &[f32],
            dx: &mut [f32],
            g: &sprout_core::geometry::Conv2dGeometry,
        ) {
            sprout_core::reference::conv2d_grad_input(dy, w, dx, g)
        }
        fn conv2d_grad_weight(
            &mut self,
            dy: &[f32],
            x: &[f32],
            dw: &mut [f32],
            g: &sprout_core::geometry::Conv2dGeometry,
        ) {
            sprout_core::reference::conv2d_grad_weight(dy, x, dw, g);
            dw.iter_mut().for_each(|v| *v *= 1.001);
        }
    }
    sprout_tests::conformance::check_backend(|| OffByATenthOfAPercent, "broken");
}

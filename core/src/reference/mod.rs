//! Scalar reference kernels: the plain, exact definition of every operator. They are the
//! correctness oracle every optimised backend is checked against, so clarity beats speed.

pub mod activation;
pub mod cast;
pub mod conv;
pub mod dense;
pub mod dropout;
pub mod layer_norm;
pub mod loss;
pub mod loss_scale;
pub mod norm;
pub mod optim;
pub mod pointwise;
pub mod pool;
pub mod tolerance;

pub(crate) mod layout;
#[cfg(test)]
mod testing;

pub use activation::{
    log_softmax, log_softmax_grad, relu, relu6, relu6_grad, relu6_grad_in_place, relu6_in_place,
    relu_grad, relu_grad_in_place, relu_in_place, softmax, softmax_grad, Rectifier,
};
pub use cast::{
    cast_f16_to_f32, cast_f32_to_f16, rectify_through_f16, rectify_through_f16_in_place,
    round_through_f16, round_through_f16_in_place,
};
pub use conv::{
    conv2d, conv2d_grad_input, conv2d_grad_weight, conv2d_norm_act, norm_act_in_place, FrozenNorm,
};
pub use dense::{
    add, bias_grad, broadcast, broadcast_grad, concat, concat_grad, copy, fill, linear,
    linear_grad_input, linear_grad_weight, pad, slice, transpose,
};
pub use dropout::{dropout, dropout_grad, dropout_in_place, dropout_keeps};
pub use layer_norm::{layer_norm, layer_norm_grad_input, layer_norm_grad_params};
pub use loss::{check_labels, cross_entropy, cross_entropy_grad, mse, mse_grad};
pub use loss_scale::{unscale_gradient, update_loss_scale};
pub use norm::{
    batch_norm_apply, batch_norm_eval, batch_norm_eval_in_place, batch_norm_grad_input,
    batch_norm_grad_input_from_sums, batch_norm_grad_input_from_sums_f16,
    batch_norm_grad_input_running, batch_norm_grad_params, batch_norm_grad_params_rectified,
    batch_norm_grad_params_rectified_f16, batch_norm_train, batch_norm_train_in_place,
    save_running_statistics,
};
pub use optim::{accumulate, adamw_update, clip_coefficient, sgd_update, sum_squares, AdamWStep};
pub use pointwise::{
    activation, activation_grad, mul, mul_grad_factor, Activation, EluParams, GeluParams,
    HardSigmoidParams, LeakyReluParams,
};
pub use pool::{
    avg_pool2d, avg_pool2d_grad, global_avg_pool, global_avg_pool_grad, max_pool2d, max_pool2d_grad,
};

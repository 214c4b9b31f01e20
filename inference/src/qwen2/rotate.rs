//! Hadamard rotations that make a layer's inputs fit int8 rows: `W x = (W H)(H x)` for an
//! orthogonal, symmetric `H` (Sylvester's Hadamard matrix over blocks of the input, scaled by
//! one over the square root of the block), so a layer may keep `W H` and take `H x`. A trained
//! decoder's inputs have a few channels far larger than the rest (the normalised residual
//! stream's outliers); with one int8 scale per row, that channel sets the scale and the rest of
//! the row rounds to a handful of codes. Rotated, the outlier's energy spreads over its block,
//! and the row's codes keep the others' information. The rotation is a fast Walsh-Hadamard
//! transform (`log2(block)` additions a value), at load on the weights and per call on the
//! inputs; it changes no result but the rounding.

use tch::Tensor;

/// The largest power of two that divides `width`, at most 512: the block a rotation of inputs
/// of that width works on (1,536 -> 512, 896 -> 128, 8,960 -> 256).
pub(super) fn block(width: i64) -> i64 {
    let mut block = 1;
    while block < 512 && width % (block * 2) == 0 {
        block *= 2;
    }
    block
}

/// `x` (`[..., width]`) with each block of `block` consecutive values of its last dimension
/// multiplied by the orthonormal Hadamard matrix (its own inverse: applying it twice gives `x`
/// back, up to float rounding).
pub(super) fn hadamard(x: &Tensor, block: i64) -> Tensor {
    let shape = x.size();
    let mut y = x.reshape([-1, block]);
    let rows = y.size()[0];
    let mut half = 1;
    while half < block {
        let pairs = y.view([rows, block / (2 * half), 2, half]);
        let (a, b) = (pairs.select(2, 0), pairs.select(2, 1));
        y = Tensor::stack(&[&a + &b, &a - &b], 2).view([rows, block]);
        half *= 2;
    }
    (y / (block as f64).sqrt()).view(shape.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rotation is orthonormal and its own inverse: a layer of rotated weights on rotated
    /// inputs computes the layer's product.
    #[test]
    fn a_rotated_layer_computes_the_same_product() {
        assert_eq!(
            (block(1536), block(896), block(8960), block(64)),
            (512, 128, 256, 64)
        );
        let x = Tensor::from_slice(
            &(0..3 * 1536)
                .map(|i| ((i * 37) % 101) as f32 - 50.0)
                .collect::<Vec<_>>(),
        )
        .view([3, 1536]);
        let w = Tensor::from_slice(
            &(0..40 * 1536)
                .map(|i| ((i * 13) % 17) as f32 - 8.0)
                .collect::<Vec<_>>(),
        )
        .view([40, 1536]);
        let b = block(1536);
        let back = hadamard(&hadamard(&x, b), b);
        assert!((back - &x).abs().max().double_value(&[]) < 1e-3);
        let want = x.matmul(&w.tr());
        let got = hadamard(&x, b).matmul(&hadamard(&w, b).tr());
        let err = (&got - &want).abs().max().double_value(&[]);
        let scale = want.abs().max().double_value(&[]);
        assert!(err < scale * 1e-5, "differs by {err} of {scale}");
        let norms = |t: &Tensor| t.norm_scalaropt_dim(2, [1i64].as_slice(), false);
        let ratio = (norms(&hadamard(&x, b)) / norms(&x) - 1.0)
            .abs()
            .max()
            .double_value(&[]);
        assert!(ratio < 1e-5, "norms change by {ratio}");
    }
}

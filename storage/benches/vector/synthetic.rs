//! The vector bench's synthetic data: seeded 384-d unit vectors in [`CLUSTERS`] clusters, drawn
//! as `clustered` or `lowdim` (see the bench's module doc). Real embeddings come from a file
//! instead (`file.rs`).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Dimension of the synthetic vectors (that of multilingual-e5-small).
pub const DIM: usize = 384;
/// Clusters the vectors are drawn around.
pub const CLUSTERS: usize = 64;
/// `clustered`: isotropic noise around the centre.
const NOISE: f32 = 0.068;
/// `lowdim`: dimension of each cluster's subspace, spread along it, and isotropic noise.
const SUBSPACE: usize = 24;
const SPREAD: f32 = 1.2;
const LOWDIM_NOISE: f32 = 0.01;

/// How the vectors are drawn around their cluster's centre.
#[derive(Clone, Copy, PartialEq)]
pub enum Data {
    /// Isotropic noise in all dimensions.
    Clustered,
    /// Spread along a low-dimensional subspace of the cluster.
    LowDim,
}

impl Data {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Data::Clustered => "clustered",
            Data::LowDim => "lowdim",
        }
    }
}

/// The clusters' centres (and subspaces) of one seed.
pub struct Synthetic {
    data: Data,
    centres: Vec<Vec<f32>>,
    /// `lowdim`: per cluster, `SUBSPACE` random unit directions.
    bases: Vec<Vec<Vec<f32>>>,
}

impl Synthetic {
    /// Draws the clusters from `seed`.
    pub fn new(data: Data, seed: u64) -> Synthetic {
        let mut rng = SmallRng::seed_from_u64(seed);
        let random_unit = |rng: &mut SmallRng| unit((0..DIM).map(|_| gaussian(rng)).collect());
        let centres = (0..CLUSTERS).map(|_| random_unit(&mut rng)).collect();
        let bases = match data {
            Data::Clustered => Vec::new(),
            Data::LowDim => (0..CLUSTERS)
                .map(|_| (0..SUBSPACE).map(|_| random_unit(&mut rng)).collect())
                .collect(),
        };
        Synthetic {
            data,
            centres,
            bases,
        }
    }

    /// A vector and its cluster.
    pub fn vector(&self, rng: &mut SmallRng) -> (usize, Vec<f32>) {
        let cluster = rng.random_range(0..CLUSTERS);
        let centre = &self.centres[cluster];
        let v = match self.data {
            Data::Clustered => centre.iter().map(|c| c + NOISE * gaussian(rng)).collect(),
            Data::LowDim => {
                let mut v = centre.clone();
                #[allow(clippy::cast_precision_loss)]
                let scale = SPREAD / (SUBSPACE as f32).sqrt();
                for direction in &self.bases[cluster] {
                    let z = scale * gaussian(rng);
                    v.iter_mut().zip(direction).for_each(|(x, d)| *x += z * d);
                }
                v.iter_mut()
                    .for_each(|x| *x += LOWDIM_NOISE * gaussian(rng));
                v
            }
        };
        (cluster, unit(v))
    }
}

/// A standard normal sample (Box-Muller).
fn gaussian(rng: &mut SmallRng) -> f32 {
    let u1: f32 = rng.random_range(f32::EPSILON..1.0);
    let u2: f32 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

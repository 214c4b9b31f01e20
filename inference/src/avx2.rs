//! Loops compiled twice: for the baseline x86-64 the crate is built for, and for AVX2 with
//! FMA, chosen at run time where the CPU has them (every x86 server of the last decade), so
//! the compiler vectorises them eight floats wide instead of four.

/// Defines a function whose body is compiled for the baseline and for AVX2 with FMA, and
/// runs the AVX2 one where the CPU has it. Arguments are `name: Type`, without generics.
macro_rules! avx2_or_baseline {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn baseline($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            fn wide($($arg: $ty),*) $(-> $ret)? {
                baseline($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: `wide` needs AVX2 and FMA only, and the CPU has both.
                #[allow(unsafe_code)]
                return unsafe { wide($($arg),*) };
            }
            baseline($($arg),*)
        }
    };
}

pub(crate) use avx2_or_baseline;

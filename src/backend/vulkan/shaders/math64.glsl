// Double-precision exp, expm1, log, log1p, sin, cos, tanh, erf, erfc and pow, which GLSL does not
// have: argument reduction and polynomials (fdlibm's where it has one; exp by a Taylor
// polynomial on |r| <= ln2/2, erf by its Taylor series below 1.5 and erfc by Laplace's continued
// fraction above). Included by shaders built with TW_F64 1. Error bounds against the correctly
// rounded result, measured (docs/ops.md, "f64 on vulkan"): exp, expm1, log, log1p, sin, cos
// 2 ulp; tanh, sigmoid 3 ulp; erf 8 ulp; pow (3 + |y ln x|) ulp. Compensated steps are
// `precise`: drivers that reassociate (lavapipe's NIR does, without it) would fold them away.

const double M64_LN2_HI = 6.93147180369123816490e-01LF;  // ln 2's first 32 bits
const double M64_LN2_LO = 1.90821492927058770002e-10LF;  // the rest
const double M64_INV_LN2 = 1.44269504088896338700e+00LF;
const double M64_INV_SQRT_PI = 5.64189583547756286948e-01LF;

double m64_inf() { return uint64BitsToDouble(0x7ff0000000000000UL); }
double m64_nan() { return uint64BitsToDouble(0x7ff8000000000000UL); }
// 2^k for k in [-1022, 1023].
double m64_p2(int k) { return uint64BitsToDouble(uint64_t(k + 1023) << 52); }
// x 2^k for k past the normal range too (two steps: one rounding into the subnormals).
double m64_scale(double x, int k) {
  if (k < -1022) return x * m64_p2(k + 600) * m64_p2(-600);
  if (k > 1023) return x * m64_p2(k - 1000) * m64_p2(1000);
  return x * m64_p2(k);
}

// e^r - 1 for |r| <= ln2/2 (+ a little): r + r^2 sum_{k>=2} r^(k-2)/k!, to 1/14!.
double m64_expm1_core(double r) {
  double q = 1.0LF / 87178291200.0LF;  // 1/14!
  q = q * r + 1.0LF / 6227020800.0LF;
  q = q * r + 1.0LF / 479001600.0LF;
  q = q * r + 1.0LF / 39916800.0LF;
  q = q * r + 1.0LF / 3628800.0LF;
  q = q * r + 1.0LF / 362880.0LF;
  q = q * r + 1.0LF / 40320.0LF;
  q = q * r + 1.0LF / 5040.0LF;
  q = q * r + 1.0LF / 720.0LF;
  q = q * r + 1.0LF / 120.0LF;
  q = q * r + 1.0LF / 24.0LF;
  q = q * r + 1.0LF / 6.0LF;
  q = q * r + 0.5LF;
  return r + (r * r) * q;
}
// x = k ln2 + r: k, and r (Cody-Waite: k ln2_hi is exact).
double m64_reduce_ln2(double x, out int k) {
  const double fk = floor(x * M64_INV_LN2 + 0.5LF);
  k = int(fk);
  precise double hi = x - fk * M64_LN2_HI;
  precise double r = hi - fk * M64_LN2_LO;
  return r;
}
double exp_d(double x) {
  if (isnan(x)) return x;
  if (x > 709.782712893383973096LF) return m64_inf();
  if (x < -745.1332191019412076LF) return 0.0LF;
  int k;
  const double r = m64_reduce_ln2(x, k);
  return m64_scale(1.0LF + m64_expm1_core(r), k);
}
double expm1_d(double x) {
  if (isnan(x)) return x;
  if (x > 709.782712893383973096LF) return m64_inf();
  if (x < -38.0LF) return -1.0LF;
  if (abs(x) <= 0.34657359027997264LF) return m64_expm1_core(x);
  int k;
  const double p = m64_expm1_core(m64_reduce_ln2(x, k));
  if (k > 56) return m64_scale(1.0LF + p, k) - 1.0LF;
  return m64_scale(p, k) + (m64_p2(k) - 1.0LF);  // 2^k (1 + p) - 1; 2^k - 1 exact here
}

// log(1 + f) - f + f^2/2 pieces for f in [sqrt(1/2) - 1, sqrt(2) - 1] (fdlibm's e_log.c):
// s = f / (2 + f), R(s^2) the minimax polynomial.
void m64_log_core(double f, out double s, out double hfsq, out double R) {
  s = f / (2.0LF + f);
  const double z = s * s, w = z * z;
  const double t1 = w * (3.999999999940941908e-01LF +
                         w * (2.222219843214978396e-01LF + w * 1.531383769920937332e-01LF));
  const double t2 =
      z * (6.666666666666735130e-01LF +
           w * (2.857142874366239149e-01LF +
                w * (1.818357216161805012e-01LF + w * 1.479819860511658591e-01LF)));
  R = t2 + t1;
  hfsq = 0.5LF * f * f;
}
double log_d(double x) {
  if (isnan(x) || x < 0.0LF) return m64_nan();
  if (x == 0.0LF) return -m64_inf();
  if (isinf(x)) return x;
  int k = 0;
  if (x < 2.2250738585072014e-308LF) {  // subnormal: scale into the normals first
    x *= m64_p2(54);
    k = -54;
  }
  const uint64_t bits = doubleBitsToUint64(x);
  k += int(bits >> 52) - 1023;
  double m = uint64BitsToDouble((bits & 0x000fffffffffffffUL) | 0x3ff0000000000000UL);
  if (m > 1.4142135623730951LF) {  // m in [sqrt(1/2), sqrt(2)]
    m *= 0.5LF;
    k += 1;
  }
  const double f = m - 1.0LF;
  double s, hfsq, R;
  m64_log_core(f, s, hfsq, R);
  const double dk = double(k);
  precise double r = dk * M64_LN2_HI - ((hfsq - (s * (hfsq + R) + dk * M64_LN2_LO)) - f);
  return r;
}
double log1p_d(double x) {
  if (isnan(x)) return x;
  if (x < -1.0LF) return m64_nan();
  if (x == -1.0LF) return -m64_inf();
  if (isinf(x)) return x;
  if (x > -0.2928932188134524LF && x < 0.41421356237309515LF) {
    if (x == 0.0LF) return x;  // keeps -0
    double s, hfsq, R;
    m64_log_core(x, s, hfsq, R);
    precise double r = x - (hfsq - s * (hfsq + R));
    return r;
  }
  precise double u = 1.0LF + x;
  precise double c = (x - (u - 1.0LF)) / u;  // what rounding 1 + x lost, relative to u
  return log_d(u) + c;
}

// sin and cos on [-pi/4, pi/4] of x + y (y: the reduction's tail); fdlibm's k_sin.c, k_cos.c.
double m64_ksin(double x, double y) {
  const double z = x * x, w = z * z, v = z * x;
  const double r = 8.33333333332248946124e-03LF +
                   z * (-1.98412698298579493134e-04LF + z * 2.75573137070700676789e-06LF) +
                   z * w * (-2.50507602534068634195e-08LF + z * 1.58969099521155010221e-10LF);
  precise double s = x - ((z * (0.5LF * y - v * r) - y) - v * -1.66666666666666324348e-01LF);
  return s;
}
double m64_kcos(double x, double y) {
  const double z = x * x, w = z * z;
  const double r =
      z * (4.16666666666666019037e-02LF +
           z * (-1.38888888888741095749e-03LF + z * 2.48015872894767294178e-05LF)) +
      w * w *
          (-2.75573143513906633035e-07LF +
           z * (2.08757232129817482790e-09LF + z * -1.13596475577881948265e-11LF));
  const double hz = 0.5LF * z;
  precise double c = 1.0LF - hz;
  precise double res = c + (((1.0LF - c) - hz) + (z * r - x * y));
  return res;
}
// x = n pi/2 + (y0 + y1), |y0 + y1| <= pi/4 (about): n mod 4. pi/2 in three parts of 33, 33
// and 53 bits (fdlibm's e_rem_pio2.c, its second iteration): exact products while |n| < 2^20,
// so within the bound for |x| < 1.6e6; beyond, the error grows with |x| (docs/ops.md).
int m64_rem_pio2(double x, out double y0, out double y1) {
  if (abs(x) <= 0.78539816339744830962LF) {
    y0 = x;
    y1 = 0.0LF;
    return 0;
  }
  const double fn = floor(x * 6.36619772367581382433e-01LF + 0.5LF);
  precise double t = x - fn * 1.57079632673412561417e+00LF;
  precise double w = fn * 6.07710050630396597660e-11LF;
  precise double r = t - w;
  precise double w2 = fn * 2.02226624879595063154e-21LF - ((t - r) - w);
  precise double a = r - w2;
  precise double b = (r - a) - w2;
  y0 = a;
  y1 = b;
  return int(int64_t(fn) & 3);
}
double sin_d(double x) {
  if (isnan(x) || isinf(x)) return m64_nan();
  double a, b;
  const int n = m64_rem_pio2(x, a, b);
  if (n == 0) return m64_ksin(a, b);
  if (n == 1) return m64_kcos(a, b);
  if (n == 2) return -m64_ksin(a, b);
  return -m64_kcos(a, b);
}
double cos_d(double x) {
  if (isnan(x) || isinf(x)) return m64_nan();
  double a, b;
  const int n = m64_rem_pio2(x, a, b);
  if (n == 0) return m64_kcos(a, b);
  if (n == 1) return -m64_ksin(a, b);
  if (n == 2) return -m64_kcos(a, b);
  return m64_ksin(a, b);
}
double tanh_d(double x) {
  if (isnan(x)) return x;
  const double ax = abs(x);
  if (ax < 3.725290298461914e-09LF) return x;  // 2^-28: x itself (keeps -0)
  double r;
  if (ax >= 22.0LF) {
    r = 1.0LF;
  } else if (ax >= 1.0LF) {
    r = 1.0LF - 2.0LF / (expm1_d(2.0LF * ax) + 2.0LF);
  } else {
    const double t = expm1_d(-2.0LF * ax);
    r = -t / (t + 2.0LF);
  }
  return x < 0.0LF ? -r : r;
}

// e^(-x^2) with x^2 split exactly (hi + lo, Veltkamp): x^2's rounding would cost |x|^2 ulp.
double m64_exp_neg_sq(double x) {
  precise double c = 134217729.0LF * x;  // 2^27 + 1
  precise double xh = c - (c - x);
  precise double xl = x - xh;
  precise double hi = x * x;
  precise double lo = ((xh * xh - hi) + 2.0LF * xh * xl) + xl * xl;
  return exp_d(-hi) * (1.0LF - lo);
}
// erfc(z) for z >= 1.5: e^(-z^2) / sqrt(pi) / K, K = z + (1/2)/(z + 1/(z + (3/2)/(z + ...)))
// (Laplace's continued fraction), evaluated from depth 100 up: converged to an ulp there.
double m64_erfc_cf(double z) {
  if (z > 27.3LF) return 0.0LF;  // below the smallest subnormal
  double f = z;
  for (int n = 100; n > 0; --n) f = z + (double(n) * 0.5LF) / f;
  return m64_exp_neg_sq(z) * M64_INV_SQRT_PI / f;
}
// erf(x) for |x| < 1.5: 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)), to convergence.
double m64_erf_series(double x) {
  const double x2 = x * x;
  double t = x, s = x;
  for (int n = 1; n < 60; ++n) {
    t *= -x2 / double(n);
    const double s2 = s + t / double(2 * n + 1);
    if (s2 == s) break;
    s = s2;
  }
  return s * 1.12837916709551257390LF;
}
double erf_d(double x) {
  if (isnan(x)) return x;
  const double ax = abs(x);
  if (ax < 1.5LF) return m64_erf_series(x);
  const double r = 1.0LF - m64_erfc_cf(ax);
  return x < 0.0LF ? -r : r;
}
// 1 + erf(y), without the cancellation below y = -1.5 (there it is erfc(-y)).
double one_plus_erf_d(double y) {
  if (isnan(y)) return y;
  if (y > -1.5LF) return 1.0LF + erf_d(y);
  return m64_erfc_cf(-y);
}
bool m64_is_int(double y) { return floor(y) == y && !isinf(y); }
bool m64_is_odd_int(double y) { return m64_is_int(y) && abs(y - 2.0LF * floor(y * 0.5LF)) == 1.0LF; }
// pow by C's special cases, then e^(y log|x|).
double pow_d(double x, double y) {
  if (y == 0.0LF || x == 1.0LF) return 1.0LF;
  if (isnan(x) || isnan(y)) return x + y;
  const double ax = abs(x);
  if (isinf(y)) {
    if (ax == 1.0LF) return 1.0LF;
    return (ax > 1.0LF) == (y > 0.0LF) ? m64_inf() : 0.0LF;
  }
  if (x < 0.0LF && !m64_is_int(y)) return m64_nan();
  double r;
  if (ax == 0.0LF) {
    r = y > 0.0LF ? 0.0LF : m64_inf();
  } else if (isinf(ax)) {
    r = y > 0.0LF ? m64_inf() : 0.0LF;
  } else {
    r = exp_d(y * log_d(ax));
  }
  const bool neg = (x < 0.0LF || (x == 0.0LF && doubleBitsToUint64(x) != 0UL)) && m64_is_odd_int(y);
  return neg ? -r : r;
}
// fmod (a's sign): a - b trunc(a / b) with the product's rounding error put back (Dekker), and
// the quotient corrected when a / b rounded to the next integer. Exact for |a / b| < 2^52.
double fmod_d(double a, double b) {
  if (isnan(a) || isnan(b) || isinf(a) || b == 0.0LF) return m64_nan();
  if (isinf(b)) return a;
  const double q = trunc(a / b);
  precise double cb = 134217729.0LF * b;
  precise double bh = cb - (cb - b);
  precise double bl = b - bh;
  precise double cq = 134217729.0LF * q;
  precise double qh = cq - (cq - q);
  precise double ql = q - qh;
  precise double p = b * q;
  precise double e = ((bh * qh - p) + bh * ql + bl * qh) + bl * ql;
  precise double m = (a - p) - e;
  const double sa = a < 0.0LF ? -abs(b) : abs(b);
  if (m != 0.0LF && (m < 0.0LF) != (a < 0.0LF)) m += sa;
  if (abs(m) >= abs(b)) m -= sa;
  return m;
}

package checked

import (
	"math"
	"math/big"
	"testing"
)

func fits(x *big.Int) bool { return x.IsInt64() }

func FuzzArithmetic(f *testing.F) {
	for _, v := range [][2]int64{{0, 0}, {1, -1}, {math.MaxInt64, 1}, {math.MinInt64, -1}, {math.MinInt64, 1}, {-1, math.MinInt64}, {3037000500, 3037000500}, {7, 2}, {-7, 2}} {
		f.Add(v[0], v[1])
	}
	f.Fuzz(func(t *testing.T, a, b int64) {
		A, B := big.NewInt(a), big.NewInt(b)
		check := func(name string, got int64, ok bool, want *big.Int) {
			if ok != fits(want) || (ok && got != want.Int64()) {
				t.Fatalf("%s(%d, %d) = %d, %v; exact %v", name, a, b, got, ok, want)
			}
		}
		s, ok := Add(a, b)
		check("Add", s, ok, new(big.Int).Add(A, B))
		s, ok = Sub(a, b)
		check("Sub", s, ok, new(big.Int).Sub(A, B))
		s, ok = Mul(a, b)
		check("Mul", s, ok, new(big.Int).Mul(A, B))
		if a >= 0 && b >= 0 {
			for _, c := range []int64{1, 3, 1000, b/2 + 1, math.MaxInt64} {
				C := big.NewInt(c)
				prod := new(big.Int).Mul(A, B)
				fl := new(big.Int).Div(prod, C)
				ce := new(big.Int).Div(new(big.Int).Add(prod, new(big.Int).Sub(C, big.NewInt(1))), C)
				q, ok := MulDiv(a, b, c)
				check("MulDiv", q, ok, fl)
				q, ok = MulDivCeil(a, b, c)
				check("MulDivCeil", q, ok, ce)
			}
		}
		if b > 0 {
			// ⌈a/b⌉ = -⌊-a/b⌋
			want := new(big.Int).Neg(new(big.Int).Div(new(big.Int).Neg(A), B))
			if got := CeilDiv(a, b); got != want.Int64() {
				t.Fatalf("CeilDiv(%d, %d) = %d, want %v", a, b, got, want)
			}
		}
	})
}

func TestSatAddAndAhead(t *testing.T) {
	if SatAdd(math.MaxInt64-1, 5) != math.MaxInt64 || SatAdd(3, 4) != 7 {
		t.Fatal("SatAdd")
	}
	for _, c := range []struct {
		state, now, limit, ahead int64
		beyond                   bool
	}{
		{10, 20, 5, 0, false}, {20, 20, 5, 0, false}, {23, 20, 5, 3, false}, {25, 20, 5, 5, false},
		{26, 20, 5, 5, true}, {math.MaxInt64, -10, 5, 5, true},
	} {
		if a, b := Ahead(c.state, c.now, c.limit); a != c.ahead || b != c.beyond {
			t.Errorf("Ahead(%d, %d, %d) = %d, %v", c.state, c.now, c.limit, a, b)
		}
	}
}

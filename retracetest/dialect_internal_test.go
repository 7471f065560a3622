package retracetest

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every meaning has a whole row: each dialect's status, type and message,
// OpenAI's code, and no code on Anthropic's side, which has none.
func TestCatalogueRowsAreWhole(t *testing.T) {
	for m := ownWords + 1; int(m) < len(catalogue); m++ {
		row := catalogue[m]
		for _, w := range []wording{row.openAI, row.anthropic} {
			assert.NotZero(t, w.status, "meaning %d", m)
			assert.NotEmpty(t, w.typ, "meaning %d", m)
			assert.NotEmpty(t, w.message, "meaning %d", m)
		}
		assert.NotEmpty(t, row.openAI.code, "meaning %d", m)
		assert.Empty(t, row.anthropic.code, "meaning %d", m)
		_, known := anthropicTypes[row.anthropic.typ]
		assert.True(t, known, "meaning %d: %s is one of Anthropic's types", m, row.anthropic.typ)
	}
}

// An OpenAI code means one Anthropic type, whichever row names it, so that
// a Status or an ErrorEvent with that code takes the type its faults have.
func TestCatalogueCodesMeanOneType(t *testing.T) {
	types := map[string]string{}
	for m := ownWords + 1; int(m) < len(catalogue); m++ {
		row := catalogue[m]
		if typ, ok := types[row.openAI.code]; ok {
			assert.Equal(t, typ, row.anthropic.typ, "code %s", row.openAI.code)
		}
		types[row.openAI.code] = row.anthropic.typ
	}
}

package delegate

import (
	"errors"
	"strconv"
)

type errString string

func (e errString) Error() string { return string(e) }

func errorsAs(err error, target any) bool { return errors.As(err, target) }

func itoa(c int32) string { return strconv.Itoa(int(c)) }

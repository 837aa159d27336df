// Command gendoc writes docs/reference/cli.md, the reference of `archiver logs` and `archiver
// audit`, from their command tree (cli.WriteReference). Run it from the repository's root:
//
//	go run ./pkg/cli/gendoc
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/jobvault/jobvault/pkg/cli"
)

func main() {
	out := flag.String("out", cli.ReferencePath, "File to write.")
	flag.Parse()
	var b bytes.Buffer
	if err := cli.WriteReference(&b); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}

package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The SBOM of a release: an SPDX 2.3 document (JSON) describing every file
// make dist writes, with, for each Go binary, the modules linked into it
// as its build information records them (debug/buildinfo: what `go version
// -m` prints), each with its version, package URL and declared license.
//
//	go run . sbom -dist DIR -version 0.1.0 -readme ../README.md -created RFC3339 -out FILE
//
// Licenses come from the README's table of modules and licenses, which
// licenses_test.go checks against each module's own license file, written
// as SPDX license expressions; a module the table lacks is NOASSERTION. The project's modules are at the
// release's version (a build between releases records them as (devel) or
// through a replace directive).

// spdxDoc and the types below are the parts of SPDX 2.3's JSON form this
// document uses.
type spdxDoc struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      spdxCreation   `json:"creationInfo"`
	Packages          []spdxPackage  `json:"packages"`
	Files             []spdxFile     `json:"files"`
	Relationships     []spdxRelation `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID           string       `json:"SPDXID"`
	Name             string       `json:"name"`
	VersionInfo      string       `json:"versionInfo"`
	DownloadLocation string       `json:"downloadLocation"`
	FilesAnalyzed    bool         `json:"filesAnalyzed"`
	LicenseConcluded string       `json:"licenseConcluded"`
	LicenseDeclared  string       `json:"licenseDeclared"`
	CopyrightText    string       `json:"copyrightText"`
	ExternalRefs     []spdxExtRef `json:"externalRefs"`
}

type spdxExtRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxSum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxFile struct {
	FileName         string    `json:"fileName"`
	SPDXID           string    `json:"SPDXID"`
	Checksums        []spdxSum `json:"checksums"`
	LicenseConcluded string    `json:"licenseConcluded"`
	CopyrightText    string    `json:"copyrightText"`
}

type spdxRelation struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// mod is one Go module as a package of the document.
type mod struct{ path, version string }

func sbomMain(args []string) {
	fs := flag.NewFlagSet("sbom", flag.ExitOnError)
	dist := fs.String("dist", "", "the release files' folder (make dist's build/dist)")
	version := fs.String("version", "", "the release's version, X.Y.Z")
	readme := fs.String("readme", "README.md", "the README holding the table of modules and licenses")
	created := fs.String("created", "", "the document's creation time, RFC 3339 (the release commit's, so that it is reproducible)")
	out := fs.String("out", "", "the SPDX JSON file to write")
	fs.Parse(args)
	rows, err := readmeTable(*readme)
	if err == nil {
		licenses := map[string]string{}
		for _, r := range rows {
			licenses[r.module] = r.license
		}
		var doc *spdxDoc
		doc, err = sbom(*dist, *version, *created, licenses)
		if err == nil {
			var b []byte
			b, err = json.MarshalIndent(doc, "", "  ")
			if err == nil {
				err = os.WriteFile(*out, append(b, '\n'), 0o644)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release sbom:", err)
		os.Exit(1)
	}
}

// row is one line of the README's table of modules and licenses: the
// module's path, its license (SPDX identifiers), what links it.
type row struct{ module, license, in string }

// readmeTable reads the README's table of modules and licenses
// (licenses_test.go checks it against each module's license file).
func readmeTable(readme string) ([]row, error) {
	b, err := os.ReadFile(readme)
	if err != nil {
		return nil, err
	}
	_, table, ok := strings.Cut(string(b), "| module | license | in |\n|---|---|---|\n")
	if !ok {
		return nil, fmt.Errorf("%s has no table of modules and licenses", readme)
	}
	var rows []row
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| ") {
			break
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 3 {
			return nil, fmt.Errorf("%s: row %q of the licenses table", readme, line)
		}
		rows = append(rows, row{cells[0], cells[1], cells[2]})
	}
	return rows, nil
}

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// sbom describes the files in dist (but SHA256SUMS and .spdx.json files).
func sbom(dist, version, created string, licenses map[string]string) (*spdxDoc, error) {
	if version == "" || strings.HasPrefix(version, "v") {
		return nil, fmt.Errorf("-version %q: give it as X.Y.Z", version)
	}
	if _, err := time.Parse(time.RFC3339, created); err != nil {
		return nil, fmt.Errorf("-created %q: %v", created, err)
	}
	entries, err := os.ReadDir(dist)
	if err != nil {
		return nil, err
	}
	doc := &spdxDoc{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              "ratelimit-" + version,
		DocumentNamespace: "https://github.com/seed-6b3823f5/ratelimit/releases/download/v" + version + "/ratelimit-" + version + ".spdx.json",
		CreationInfo:      spdxCreation{Created: created, Creators: []string{"Tool: " + Library + "/release"}},
	}
	pkgs := map[mod]string{} // the package's SPDXID
	pkg := func(m mod) string {
		if id, ok := pkgs[m]; ok {
			return id
		}
		id := "SPDXRef-Package-" + spdxIDUnsafe.ReplaceAllString(m.path+"-"+m.version, "-")
		pkgs[m] = id
		p := spdxPackage{
			SPDXID: id, Name: m.path, VersionInfo: m.version, DownloadLocation: "NOASSERTION",
			LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
		}
		switch {
		case m.path == "stdlib":
			p.LicenseDeclared = "BSD-3-Clause"
			p.DownloadLocation = "https://go.dev/dl/"
			p.ExternalRefs = []spdxExtRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/stdlib@" + m.version}}
		case m.path == Library || strings.HasPrefix(m.path, Library+"/"):
			p.LicenseDeclared = "Apache-2.0"
			p.DownloadLocation = "git+https://github.com/seed-6b3823f5/ratelimit@v" + version
			p.ExternalRefs = []spdxExtRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + m.path + "@" + m.version}}
		default:
			if l := licenses[m.path]; l != "" {
				// The README's "MIT and Apache-2.0" is SPDX's
				// "MIT AND Apache-2.0" (both apply).
				p.LicenseDeclared = strings.ReplaceAll(l, " and ", " AND ")
			}
			p.DownloadLocation = "https://proxy.golang.org/" + m.path + "/@v/" + m.version + ".zip"
			p.ExternalRefs = []spdxExtRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + m.path + "@" + m.version}}
		}
		doc.Packages = append(doc.Packages, p)
		return id
	}
	project := mod{Library, "v" + version}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || name == "SHA256SUMS" || strings.HasSuffix(name, ".spdx.json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		fileID := "SPDXRef-File-" + spdxIDUnsafe.ReplaceAllString(name, "-")
		doc.Files = append(doc.Files, spdxFile{
			FileName: "./" + name, SPDXID: fileID, Checksums: []spdxSum{{"SHA256", hex.EncodeToString(sum[:])}},
			LicenseConcluded: "NOASSERTION", CopyrightText: "NOASSERTION",
		})
		doc.Relationships = append(doc.Relationships, spdxRelation{"SPDXRef-DOCUMENT", "DESCRIBES", fileID})
		info, err := buildinfo.ReadFile(filepath.Join(dist, name))
		if err != nil {
			// Not a Go binary (the Lua library, the scripts): made from
			// the project's source.
			doc.Relationships = append(doc.Relationships, spdxRelation{fileID, "GENERATED_FROM", pkg(project)})
			continue
		}
		linked := []mod{{"stdlib", info.GoVersion}, {info.Main.Path, "v" + version}}
		for _, d := range info.Deps {
			m := mod{d.Path, d.Version}
			if d.Replace != nil && d.Replace.Version != "" {
				m.version = d.Replace.Version
			}
			if m.path == Library || strings.HasPrefix(m.path, Library+"/") {
				m.version = "v" + version
			} else if d.Replace != nil && d.Replace.Version == "" {
				return nil, fmt.Errorf("%s: %s is replaced by the folder %s: a release links only published modules", name, d.Path, d.Replace.Path)
			}
			linked = append(linked, m)
		}
		for _, m := range linked {
			doc.Relationships = append(doc.Relationships, spdxRelation{fileID, "CONTAINS", pkg(m)})
		}
	}
	if len(doc.Files) == 0 {
		return nil, errors.New(dist + " holds no release files")
	}
	slices.SortFunc(doc.Packages, func(a, b spdxPackage) int { return strings.Compare(a.SPDXID, b.SPDXID) })
	return doc, nil
}

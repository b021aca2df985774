module github.com/seed-6b3823f5/ratelimit/release

go 1.26.0

require golang.org/x/mod v0.41.0

require gopkg.in/yaml.v3 v3.0.1

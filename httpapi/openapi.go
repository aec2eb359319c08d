package httpapi

import _ "embed"

// OpenAPI is the OpenAPI 3.1 description of the API, served at
// /v1/openapi.json. docs/openapi.json is a copy (a test keeps them equal).
//
//go:embed openapi.json
var OpenAPI []byte

package api

// Custom search attributes every Fit upserts, so that runs can be found in
// the Web UI and with `temporal workflow list --query`, e.g.
// "TempotrainFunc='mnist-mlp' AND TempotrainStatus='running'". The embedded
// dev server registers them; on a cluster, register them once per namespace:
//
//	temporal operator search-attribute create --namespace default \
//	  --name TempotrainRun --type Keyword --name TempotrainFunc --type Keyword \
//	  --name TempotrainStatus --type Keyword --name TempotrainAttempt --type Int \
//	  --name TempotrainWorldSize --type Int --name TempotrainBestScore --type Double
//
// A worker whose namespace lacks them runs Fits without upserting them.
const (
	SARun       = "TempotrainRun"       // Keyword: the run's name
	SAFunc      = "TempotrainFunc"      // Keyword: the training function
	SAStatus    = "TempotrainStatus"    // Keyword: running, succeeded, failed, cancelled
	SAAttempt   = "TempotrainAttempt"   // Int: the current attempt
	SAWorldSize = "TempotrainWorldSize" // Int: the current attempt's world size
	SABestScore = "TempotrainBestScore" // Double: the best checkpoint's score attribute
)

// SearchAttributeType is the type of a search attribute, as the Temporal
// CLI names it.
type SearchAttributeType string

// Search attribute types.
const (
	SAKeyword SearchAttributeType = "Keyword"
	SAInt     SearchAttributeType = "Int"
	SADouble  SearchAttributeType = "Double"
)

// SearchAttributes are the custom search attributes of Fit and their types.
var SearchAttributes = map[string]SearchAttributeType{
	SARun: SAKeyword, SAFunc: SAKeyword, SAStatus: SAKeyword,
	SAAttempt: SAInt, SAWorldSize: SAInt, SABestScore: SADouble,
}
